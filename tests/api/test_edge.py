"""The HTTP edge: an unhandled error is a 500 with a request id that keeps the connection;
the API's answers are never cached; redirects never point at the request's Host."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from parley.api.app import create_app
from parley.api.edge import Edge
from parley.services import Services
from parley.store import chats
from tests.builders import served
from tests.helpers import PASSWORD, assert_error, bearer, signup


@pytest.fixture
async def server_url(services: Services) -> AsyncIterator[str]:
    """The app behind a real uvicorn server (its connection handling is what is tested)."""
    async with served(create_app(services, close_services=False)) as base:
        yield base


def _local_port(r: httpx.Response) -> int:
    port: int = r.extensions["network_stream"].get_extra_info("client_addr")[1]
    return port


async def test_an_unhandled_error_is_a_500_with_a_request_id_and_the_connection_lives(
    server_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*_: object, **__: object) -> None:
        raise RuntimeError("the store broke")

    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=server_url, limits=one, timeout=10) as client:
        auth = bearer((await signup(client, "ada@example.com"))["token"])
        monkeypatch.setattr(chats, "list_chats", broken)
        with caplog.at_level(logging.ERROR):
            failed = await client.get("/api/chats", headers=auth)
        error = assert_error(failed, 500, "internal_error")
        request_id = failed.headers["x-request-id"]
        assert len(request_id) >= 8
        assert request_id in error["message"]
        assert "the store broke" not in failed.text
        logged = [r for r in caplog.records if request_id in r.getMessage()]
        assert logged and logged[0].exc_info is not None
        assert failed.headers.get("connection", "").lower() != "close"
        # the next request goes on the same connection, and is answered
        ok = await client.get("/api/me", headers=auth)
        assert ok.status_code == 200, ok.text
        assert _local_port(ok) == _local_port(failed)
        assert ok.headers["x-request-id"] != request_id


async def test_api_answers_are_not_stored_by_caches(client: httpx.AsyncClient) -> None:
    created = await client.post(
        "/api/auth/signup", json={"email": "ada@example.com", "password": PASSWORD}
    )
    login = await client.post(
        "/api/auth/login", json={"email": "ada@example.com", "password": PASSWORD}
    )
    auth = bearer(login.json()["token"])
    answers = [
        created,
        login,
        await client.get("/api/me", headers=auth),
        await client.get("/api/chats", headers=auth),
        await client.get("/api/chats", headers={}),
        await client.get("/api/nope", headers=auth),
        await client.get("/v1/models", headers=auth),
    ]
    for r in answers:
        assert r.headers.get("cache-control") == "no-store", (r.request.url, r.headers)


@pytest.mark.parametrize(
    ("path", "to"),
    [("/static", "/static/"), ("/api/chats/", "/api/chats"), ("/static?x=1", "/static/?x=1")],
)
async def test_redirects_never_point_at_the_requests_host(
    client: httpx.AsyncClient, path: str, to: str
) -> None:
    r = await client.get(path, headers={"Host": "evil.example"})
    assert r.is_redirect, r.status_code
    location = r.headers["location"]
    assert urlsplit(location).netloc == "" and not location.startswith("//"), location
    assert location == to
    assert r.headers.get("cache-control") == "no-store" or not path.startswith("/api")


async def test_an_event_stream_keeps_every_middlewares_headers_and_skips_them_after(
    run_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's SSE, through a real server: its start carries what each middleware adds
    (request id, no-store, nosniff), its body arrives whole, and the body's chunks went to
    the server's own ``send``, not through the middlewares (``api/sse.py``): the edge saw
    one message of the stream, its start."""
    seen: list[str] = []
    original = Edge.__call__

    async def counting(self: Edge, scope: Scope, receive: Receive, send: Send) -> None:
        async def counted(message: Message) -> None:
            if str(scope.get("path", "")).endswith("/messages"):
                seen.append(message["type"])
            await send(message)

        await original(self, scope, receive, counted)

    monkeypatch.setattr(Edge, "__call__", counting)
    async with (
        served(create_app(run_services, close_services=False)) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        auth = bearer((await signup(client, "ada@example.com"))["token"])
        chat = (await client.post("/api/chats", json={}, headers=auth)).json()["id"]
        async with client.stream(
            "POST",
            f"/api/chats/{chat}/messages",
            json={"content": "/echo one two three"},
            headers=auth,
        ) as r:
            assert r.status_code == 200
            body = (await r.aread()).decode()
    assert r.headers["content-type"].startswith("text/event-stream")
    assert len(r.headers["x-request-id"]) >= 8
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "event: done" in body and body.count("event: delta") >= 3
    assert seen == ["http.response.start"]
