"""Login and sign-up throttles over HTTP: by (email, client address), a slower lane per
email that never refuses the right password, X-Forwarded-For only from trusted proxies,
and one count shared by every api process (the bus)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from parley.api.app import create_app
from parley.bus.interface import Bus
from parley.config import Settings
from parley.connections import bus_limits
from tests.builders import BUS_BACKENDS, make_bus, services_for
from tests.helpers import PASSWORD, assert_error, signup
from tests.processes import Parley, free_port

ATTACKER = "198.51.100.7"
OWNER = "203.0.113.9"
RIGHT = {"email": "ada@example.com", "password": PASSWORD}
WRONG = {"email": "ada@example.com", "password": "not the password"}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"trusted_proxies": ["10.0.0.0/8", "192.0.2.1"]}


@asynccontextmanager
async def _from(app: FastAPI, address: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``app`` whose connections come from ``address``."""
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://parley.test") as c:
        yield c


def _app(client: httpx.AsyncClient) -> FastAPI:
    app: FastAPI = client._transport.app  # type: ignore[attr-defined]
    return app


async def _fail_five_times(c: httpx.AsyncClient, **headers: str) -> None:
    for _ in range(5):
        assert_error(await c.post("/api/auth/login", json=WRONG, headers=headers), 401)


async def test_an_attacker_locks_out_their_address_not_the_owner(
    client: httpx.AsyncClient,
) -> None:
    await signup(client, "ada@example.com")
    async with _from(_app(client), ATTACKER) as attacker, _from(_app(client), OWNER) as owner:
        await _fail_five_times(attacker)
        r = await attacker.post("/api/auth/login", json=RIGHT)
        assert_error(r, 429, "too_many_login_attempts")  # even the right password, from there
        assert int(r.headers["retry-after"]) >= 1
        r = await owner.post("/api/auth/login", json=RIGHT)
        assert r.status_code == 200, r.text
        # and the owner's own mistakes are counted apart from the attacker's
        assert_error(await owner.post("/api/auth/login", json=WRONG), 401, "invalid_login")


@pytest.mark.parametrize(
    "settings_overrides",
    [{"login_email_free_failures": 3, "login_email_max_delay_seconds": 30}],
)
async def test_many_failures_for_an_email_slow_its_logins_but_never_refuse_them(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await signup(client, "ada@example.com")
    holds: list[float] = []  # each hold the throttle put on a login (recorded, not slept)
    throttles = _app(client).state.services.accounts._throttles

    async def held(seconds: float) -> None:
        holds.append(seconds)

    monkeypatch.setattr(throttles, "_sleep", held)
    for n in range(4):  # four addresses, one failure each: no address is locked out
        async with _from(_app(client), f"198.51.100.{n + 1}") as c:
            assert_error(await c.post("/api/auth/login", json=WRONG), 401)
    assert len(holds) == 1  # the fourth failure, past the 3 free ones, came 1 s too soon
    async with _from(_app(client), OWNER) as owner:
        r = await owner.post("/api/auth/login", json=RIGHT)
        assert r.status_code == 200, r.text  # slowed, not refused
        assert len(holds) == 2 and holds[1] > 0  # held (2 s after the 4th, less the time since)
        # a success clears the email's record: the next login is not held at all
        assert (await owner.post("/api/auth/login", json=RIGHT)).status_code == 200
        assert len(holds) == 2, holds


async def test_x_forwarded_for_counts_only_from_a_trusted_proxy(
    client: httpx.AsyncClient,
) -> None:
    await signup(client, "ada@example.com")
    app = _app(client)
    async with _from(app, "10.1.2.3") as proxy, _from(app, "127.0.0.1") as direct:
        await _fail_five_times(proxy, **{"X-Forwarded-For": ATTACKER})
        r = await proxy.post("/api/auth/login", json=RIGHT, headers={"X-Forwarded-For": ATTACKER})
        assert_error(r, 429)
        # a client cannot pose as a fresh address by prepending one: the proxy appended
        # the address it saw, and the last untrusted address in the chain is the client
        spoofed = {"X-Forwarded-For": f"{OWNER}, {ATTACKER}"}
        assert_error(await proxy.post("/api/auth/login", json=RIGHT, headers=spoofed), 429)
        chain = {"X-Forwarded-For": f"{OWNER}, 10.9.9.9, 192.0.2.1"}  # through two proxies
        r = await proxy.post("/api/auth/login", json=RIGHT, headers=chain)
        assert r.status_code == 200, r.text

        # 127.0.0.1 is no trusted proxy here: its header is ignored, whatever it says
        for n in range(5):
            fresh = {"X-Forwarded-For": f"203.0.113.{100 + n}"}
            assert_error(await direct.post("/api/auth/login", json=WRONG, headers=fresh), 401)
        fresh = {"X-Forwarded-For": "203.0.113.200"}
        assert_error(await direct.post("/api/auth/login", json=RIGHT, headers=fresh), 429)


@pytest.fixture(params=BUS_BACKENDS)
async def two_processes(
    request: pytest.FixtureRequest, settings: Settings
) -> AsyncIterator[tuple[FastAPI, FastAPI]]:
    """Two api processes' apps on one database and one bus (two Redis clients)."""
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    buses: list[Bus] = [await make_bus(request.param, bus_limits(settings), namespace)]
    shared = request.param == "memory"
    buses.append(buses[0] if shared else await make_bus("redis", bus_limits(settings), namespace))
    first, second = (services_for(settings, bus=bus) for bus in buses)
    yield create_app(first, close_services=False), create_app(second, close_services=False)
    await first.close()
    await second.close()


async def test_api_processes_share_the_count(two_processes: tuple[FastAPI, FastAPI]) -> None:
    one, other = two_processes
    async with _from(one, ATTACKER) as c:
        await signup(c, "ada@example.com")
        await _fail_five_times(c)
    async with _from(other, ATTACKER) as c:
        assert_error(await c.post("/api/auth/login", json=RIGHT), 429, "too_many_login_attempts")


@pytest.mark.parametrize("settings_overrides", [{"signup_free_attempts_per_address": 3}])
async def test_sign_ups_are_limited_per_address(client: httpx.AsyncClient) -> None:
    async with _from(_app(client), ATTACKER) as c:
        weak = {"email": "x@example.com", "password": "password123"}
        assert_error(await c.post("/api/auth/signup", json=weak), 422)  # refusals are free
        taken = {"email": "taken@example.com", "password": PASSWORD}
        assert (await c.post("/api/auth/signup", json=taken)).status_code == 201
        assert_error(await c.post("/api/auth/signup", json=taken), 409, "email_taken")
        other = {"email": "other@example.com", "password": PASSWORD}
        assert (await c.post("/api/auth/signup", json=other)).status_code == 201
        probe = {"email": "probe@example.com", "password": PASSWORD}
        r = await c.post("/api/auth/signup", json=probe)
        assert_error(r, 429, "too_many_signups")
        assert int(r.headers["retry-after"]) >= 1
    async with _from(_app(client), OWNER) as c:
        assert (await c.post("/api/auth/signup", json=probe)).status_code == 201


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = Parley(
        ["serve", "--engine", "fake", "--port", str(port)],
        {"PARLEY_DATA_DIR": str(tmp_path / "data")},
        tmp_path / "serve.log",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready(url)
        yield url
    finally:
        proc.stop()


@pytest.mark.slow
def test_parley_serve_ignores_x_forwarded_for_by_default(served: str) -> None:
    """uvicorn trusts X-Forwarded-For from 127.0.0.1 unless told not to: parley tells it."""
    with httpx.Client(base_url=served) as c:
        assert c.post("/api/auth/signup", json=RIGHT).status_code == 201
        for n in range(5):
            fresh = {"X-Forwarded-For": f"203.0.113.{100 + n}"}
            assert c.post("/api/auth/login", json=WRONG, headers=fresh).status_code == 401
        fresh = {"X-Forwarded-For": "203.0.113.200"}
        assert c.post("/api/auth/login", json=RIGHT, headers=fresh).status_code == 429
