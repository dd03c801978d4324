"""The in-process bus: asyncio structures for one process (the embedded default).

``MemoryBus`` (``bus.py``) is made of one class per section of the ``Bus`` interface, in the
same modules as the Redis bus's (``parley.bus.redis``): ``queue`` (the run queue),
``streams`` (per-run event streams), ``cancel`` (cancel signals), ``slots`` (per-user stream
slots), ``budget`` (per-user token budgets), ``throttle`` (attempt throttles: logins,
sign-ups), and ``shared`` (the sections' base class).
"""

from parley.bus.memory.bus import MemoryBus

__all__ = ["MemoryBus"]
