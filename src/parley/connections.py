"""The database and the bus a process's settings name (the composition root's first step,
``services.build_services``; the CLI and the tests build them alone too)."""

from __future__ import annotations

from parley.bus.interface import Bus, BusLimits
from parley.bus.memory import MemoryBus
from parley.config import Settings
from parley.store.database import Database


def bus_limits(settings: Settings) -> BusLimits:
    b = settings.bus
    return BusLimits(
        queue_max=settings.qos.queue_max,
        stream_maxlen=b.stream_maxlen,
        stream_ttl_seconds=b.stream_ttl_seconds,
        cancel_ttl_seconds=b.stream_ttl_seconds,
        append_batching=b.stream_append_batching,
    )


def build_bus(
    settings: Settings, *, redis_url: str | None = None, namespace: str | None = None
) -> Bus:
    """The bus the settings name: Redis (``redis_url``, or the settings' own), else in-process."""
    url = redis_url or settings.bus.redis_url
    if url:
        from parley.bus.redis import RedisBus

        prefix = namespace or settings.bus.redis_namespace
        return RedisBus(url, bus_limits(settings), namespace=prefix)
    return MemoryBus(bus_limits(settings))


def database(settings: Settings) -> Database:
    """The database the settings name: the primary, and its replicas if configured."""
    d = settings.database
    return Database(
        d.resolved_url,
        echo=d.echo,
        replica_url=d.replica_url,
        connect_timeout=d.connect_timeout_seconds,
        pool_size=d.pool_size,
    )
