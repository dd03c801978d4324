"""The bus: run queue, per-run event streams, cancel signals, per-user stream slots.

``interface.Bus`` is the contract; ``memory.MemoryBus`` serves one process,
``redis.RedisBus`` serves many. ``tests/bus`` runs one suite against both.
"""
