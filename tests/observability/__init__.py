"""Tests of parley.observability."""
