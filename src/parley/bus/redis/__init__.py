"""The Redis bus: the same contract as ``MemoryBus``, shared by many processes.

``RedisBus`` (``bus.py``) is made of one class per section of the ``Bus`` interface, each in
its own module with its keys, its Lua scripts and their documentation:

``queue``
    the run queue: ``ns:{queue}:z``, ``ns:{queue}:seq``
``streams``
    per-run event streams: ``ns:run:{<run_id>}:events``
``tail``
    one blocking ``XREAD`` for all of a process's waiting stream readers
``cancel``
    cancel signals: ``ns:run:{<run_id>}:cancel``, published on ``ns:cancels``
``cancel_watch``
    one subscription to ``ns:cancels`` for all of a process's waits for a stop
``slots``
    per-user stream slots: ``ns:user:{<user_id>}:streams``
``budget``
    per-user token budgets: ``ns:user:{<user_id>}:budget``
``throttle``
    attempt throttles (logins, sign-ups): ``ns:throttle:{<digest>}:attempts``
``shared``
    the sections' base class (client, limits, key names), script registration, helpers

``ns`` is the namespace, ``parley`` by default. Every key carries a Redis Cluster hash tag
(the part in braces), so the keys one script touches share a slot. Priorities must be in
``PRIORITY_MIN..PRIORITY_MAX`` (-1..1000); others raise ValueError. Needs Redis >= 6.0
(fractional timeouts of blocking pops, scripts replicated by effect, ``CLIENT UNBLOCK``).
"""

from parley.bus.redis.bus import POOL_MAX_CONNECTIONS, RedisBus
from parley.bus.redis.queue import PRIORITY_MAX, PRIORITY_MIN, SEQ_BITS
from parley.bus.redis.shared import MAX_BLOCK_SECONDS

__all__ = [
    "MAX_BLOCK_SECONDS",
    "POOL_MAX_CONNECTIONS",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "SEQ_BITS",
    "RedisBus",
]
