"""Observability: Prometheus metrics (``metrics.py``) and OpenTelemetry traces (``tracing.py``)."""
