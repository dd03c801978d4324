"""The web UI through a database failover: a send whose answer is lost after the server
stored it is retried with its one Idempotency-Key, so the message is not stored twice; a new
chat refused with a real 503 ``dependency_unavailable`` (the server's Postgres cut off behind
a proxy, as while a primary fails over) waits on the busy banner and is retried by itself
once the database is back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.builders import BACKENDS
from tests.e2e.conftest import Server, fake_engine, log_in
from tests.e2e.proxy import CuttableProxy
from tests.e2e.test_chat_ui import answer, chat_id_of, content, open_app, send
from tests.processes import Parley, free_port

pytestmark = pytest.mark.slow


def test_a_send_stored_but_its_answer_lost_is_retried_with_its_key_and_stored_once(
    page: Page, context: BrowserContext, server: Server
) -> None:
    """The first POST reaches the server, which stores the message, starts its run and
    answers, but the answer never reaches the page (the connection is reset, as when the
    primary fails over as the answer goes out): the banner counts down, the page sends again
    with the same Idempotency-Key, and follows the run the first POST made: one message, one
    answer."""
    api = log_in(context, server)
    open_app(page, server.url)
    keys: list[str | None] = []

    def lost_answer(route: Any) -> None:
        keys.append(route.request.headers.get("idempotency-key"))
        if len(keys) == 1:
            route.fetch(timeout=60_000)  # stored, its answer generated: then lost
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route("**/api/chats/*/messages", lost_answer)
    send(page, "hello through a failover")
    expect(page.locator("#banner")).to_contain_text("Cannot reach the server")
    message = answer(page)
    expect(message).to_have_attribute("data-status", "completed", timeout=60_000)
    assert len(keys) == 2 and keys[0] is not None and keys[0] == keys[1], keys
    stored = api.messages(chat_id_of(page))
    assert [m["content"] for m in stored if m["role"] == "user"] == ["hello through a failover"]
    assert len([m for m in stored if m["role"] == "assistant"]) == 1
    assert content(message) == stored[-1]["content"]


@pytest.fixture
def on_postgres(postgres_url: str, tmp_path: Path) -> Iterator[tuple[Server, CuttableProxy]]:
    """A `parley serve` whose Postgres is reached through a proxy the test takes down."""
    if "postgres" not in BACKENDS:
        pytest.skip("needs Postgres")
    target = urlsplit(postgres_url)
    proxy = CuttableProxy(target.port or 5432)
    url = target._replace(netloc=f"{target.username}@127.0.0.1:{proxy.port}").geturl()
    port = free_port()
    env = {
        "PARLEY_DATA_DIR": str(tmp_path / "data"),
        "PARLEY_DATABASE_URL": url,
        "PARLEY_DATABASE_CONNECT_TIMEOUT_SECONDS": "2",
        **fake_engine(ttft_ms=50, itl_ms=20, tokens=12),
    }
    proc = Parley(["serve", "--engine", "fake", "--port", str(port)], env, tmp_path / "serve.log")
    try:
        server = Server(f"http://127.0.0.1:{port}", proc)
        proc.wait_ready(server.url)
        yield server, proxy
    finally:
        proc.stop()
        proxy.close()


def test_a_new_chat_refused_with_503_is_made_when_the_banner_retries(
    page: Page, context: BrowserContext, on_postgres: tuple[Server, CuttableProxy]
) -> None:
    """The first message of a new chat while the database is away: making the chat is
    refused (a real 503 from the server); the banner retries it until the database is
    back, then the message is sent. One chat, one message."""
    server, database = on_postgres
    api = log_in(context, server)
    open_app(page, server.url)
    creates: list[int] = []
    page.on(
        "response",
        lambda r: (
            creates.append(r.status)
            if r.request.method == "POST" and r.url.endswith("/api/chats")
            else None
        ),
    )
    database.down()
    send(page, "a new chat through a failover")
    expect(page.locator("#banner")).to_contain_text("busy")
    assert creates and set(creates) == {503}, creates
    database.up()
    message = answer(page)
    expect(message).to_have_attribute("data-status", "completed", timeout=60_000)
    assert creates[-1] == 201, creates
    chats = api.get("/api/chats")["data"]
    assert len(chats) == 1 and chats[0]["id"] == chat_id_of(page)
    stored = api.messages(chat_id_of(page))
    assert [m["content"] for m in stored if m["role"] == "user"] == [
        "a new chat through a failover"
    ]
