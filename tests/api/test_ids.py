"""Ids in paths: an id the server never issued is a 404 (on every backend, whatever bytes it
holds), and the error quotes at most a short prefix of it."""

from __future__ import annotations

import httpx
import pytest

from parley.errors import quoted
from tests.helpers import assert_error

# what each route takes in its path: a NUL makes Postgres refuse the query outright
ODD_IDS = ["%00", "chat_%00", "%ED%A0%80", "%C2%B2", "x" * 300]
ROUTES = [
    ("GET", "/api/chats/{id}", "chat_not_found"),
    ("PATCH", "/api/chats/{id}", "chat_not_found"),
    ("DELETE", "/api/chats/{id}", "chat_not_found"),
    ("GET", "/api/chats/{id}/messages", "chat_not_found"),
    ("POST", "/api/chats/{id}/messages", "chat_not_found"),
    ("GET", "/api/runs/{id}", "run_not_found"),
    ("GET", "/api/runs/{id}/events", "run_not_found"),
    ("POST", "/api/chats/chat_0/runs/{id}/cancel", "run_not_found"),
    ("DELETE", "/api/keys/{id}", "api_key_not_found"),
    ("DELETE", "/api/sessions/{id}", "session_not_found"),
]
BODIES = {"PATCH": {"title": "t"}, "POST": {"content": "c"}}


@pytest.mark.parametrize("odd", ODD_IDS)
async def test_ids_never_issued_are_404_on_every_backend(
    client: httpx.AsyncClient, auth: dict[str, str], odd: str
) -> None:
    for method, path, code in ROUTES:
        url = path.format(id=odd)
        r = await client.request(method, url, headers=auth, json=BODIES.get(method))
        assert_error(r, 404, code)


async def test_a_long_id_is_echoed_cut_short(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    long_id = "chat_" + "x" * 20_000  # (the prefix matters nowhere: each route cuts it)
    for method, path, _ in ROUTES:
        r = await client.request(
            method, path.format(id=long_id), headers=auth, json=BODIES.get(method)
        )
        message = assert_error(r, 404)["message"]
        assert len(r.content) < 400, (path, len(r.content))
        assert long_id[:64] in message and "…" in message


def test_quoted_cuts_what_it_echoes() -> None:
    assert quoted("abc") == "'abc'"
    assert quoted("a" * 64) == repr("a" * 64)
    assert quoted("a" * 65) == repr("a" * 64 + "…")
    assert len(quoted("\x00" * 10_000)) < 64 * 4 + 8
