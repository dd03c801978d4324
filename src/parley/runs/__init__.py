"""The run lifecycle: submit, relay (SSE with resume), cancel, sweep; the worker executes."""
