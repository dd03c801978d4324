"""Untrusted files parsed outside the server's process: a pool of worker processes with a
CPU-time, memory and wall-clock limit per job (``pool.py``), the jobs they run (``jobs.py``)
and the ``[parsing]`` settings (``settings.py``)."""
