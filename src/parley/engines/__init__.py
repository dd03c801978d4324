"""Inference engines behind one interface: fake (tests, benchmarks), built-in, upstream."""
