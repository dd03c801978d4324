"""OpenAI's wire format: the one set of types parley speaks it with (``protocol``)."""
