"""parley: a self-hostable ChatGPT-style chat service."""

__version__ = "0.1.0"
