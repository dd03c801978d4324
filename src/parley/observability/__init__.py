"""Observability: Prometheus metrics (``metrics.py``); tracing comes beside it."""
