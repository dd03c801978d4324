"""parley in front of a fleet of real OpenAI-compatible servers (processes on real sockets).

``fleet(replica urls, **upstream settings)`` starts parley (SQLite, in-process bus, a worker,
a real uvicorn server) with one model, ``fleet``, served by those replicas, and gives a
``Front``: its HTTP client, a signed-up user's headers and the router. Upstream timeouts and
probe intervals are short here, so that failures show within a test's time.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.api.app import create_app
from parley.config import load_settings
from parley.engines.router import Router
from parley.services import Services
from tests.builders import ROOMY_TIERS, migrate, served, services_for, sqlite_url
from tests.fleet.servers import EngineReplica, Misbehaving
from tests.helpers import user_headers

pytestmark = pytest.mark.slow

FLEET_MODEL = "fleet"
FAST_UPSTREAM: dict[str, Any] = {
    "connect_timeout_seconds": 2,
    "first_token_timeout_seconds": 5,
    "idle_timeout_seconds": 3,
    "probe_interval_seconds": 0.2,
    "failure_threshold": 2,
    "recovery_probes": 2,
}


@dataclass
class Front:
    client: httpx.AsyncClient
    auth: dict[str, str]
    services: Services

    @property
    def router(self) -> Router:
        engine = self.services.engine
        assert isinstance(engine, Router)
        return engine


Fleet = Callable[..., contextlib.AbstractAsyncContextManager[Front]]


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    @contextlib.asynccontextmanager
    async def start(
        urls: list[str],
        weights: list[float] | None = None,
        extra_models: list[dict[str, Any]] | None = None,
        upstream_model: str = "parley-fake",
        embedding_models: list[dict[str, Any]] | None = None,
        more: dict[str, Any] | None = None,
        **upstream: Any,
    ) -> AsyncIterator[Front]:
        """``more``: other settings of parley's."""
        url = sqlite_url(tmp_path)
        await migrate(url)
        replicas = [
            {"base_url": u, "slots": 8, "weight": (weights or [1.0] * len(urls))[i]}
            for i, u in enumerate(urls)
        ]
        settings = load_settings(
            database_url=url,
            data_dir=tmp_path,
            engines={
                "models": [
                    {
                        "name": FLEET_MODEL,
                        "engine": "openai",
                        "upstream_model": upstream_model,
                        "replicas": replicas,
                        "upstream": {**FAST_UPSTREAM, **upstream},
                    },
                    *(extra_models or []),
                ],
                "embedding_models": embedding_models or [],
            },
            lease_seconds=5,
            sweep_interval_seconds=0.5,
            tiers=ROOMY_TIERS,
            **(more or {}),
        )
        services = services_for(settings, worker=True)
        await services.start()
        try:
            app = create_app(services, close_services=False)
            async with served(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as c:
                yield Front(c, await user_headers(c, "ada@example.com"), services)
        finally:
            await services.close(grace=1)

    return start


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Callable[..., list[EngineReplica]]]:
    """``replicas(n, **fake engine pace)``: n ``parley engine serve`` processes."""
    started: list[EngineReplica] = []

    def make(n: int, **pace: float) -> list[EngineReplica]:
        new = [EngineReplica(tmp_path, f"replica{len(started) + i}", **pace) for i in range(n)]
        started.extend(new)
        return new

    yield make
    for r in started:
        r.stop()


@pytest.fixture
def misbehaving(tmp_path: Path) -> Iterator[Callable[..., Misbehaving]]:
    """``misbehaving(mode, tls=False)``: a server that misbehaves that way."""
    started: list[Misbehaving] = []

    def make(mode: str, *, tls: bool = False) -> Misbehaving:
        server = Misbehaving(tmp_path, mode, tls=tls)
        started.append(server)
        return server

    yield make
    for s in started:
        s.stop()


async def chat_homed_on(front: Front, replica_url: str) -> str:
    """A new chat whose ring owner is the replica at ``replica_url``."""
    for _ in range(200):
        r = await front.client.post("/api/chats", json={"title": "t"}, headers=front.auth)
        chat_id: str = r.json()["id"]
        home = front.router.home(chat_id)
        if home is not None and home.engine.base_url == replica_url.rstrip("/"):
            return chat_id
    raise AssertionError(f"no chat of 200 lives on {replica_url}")
