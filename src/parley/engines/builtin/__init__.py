"""parley's built-in inference engine."""
