"""Files and bodies meant to hurt (issue 39), through a real HTTP server on both run stacks:
costly PDFs refused at their limits in the parsing pool, a user's parses bounded, a parse
killed when its client goes away, bodies never read before authentication, imports read off
the event loop within their limits, and re-imports that add nothing twice."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from parley.services import Services
from tests.attachments.pdfs import pdf_bytes
from tests.helpers import assert_error, user_headers
from tests.hostile import chatgpt_conversations, pdf_with_shared_stream, zip_bomb
from tests.runs.helpers import new_chat
from tests.waiting import eventually

# ~30 s of pypdf's CPU in 11 KB: one page of 1.5 million text operators
COSTLY = pdf_with_shared_stream(1, 1_500_000)


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {
        "parsing": {"workers": 2, "per_user": 2, "cpu_seconds": 1, "wall_seconds": 60},
        "attachments": {"max_pdf_pages": 5},
        "portability": {
            "max_import_unpacked_bytes": 8 << 20,
            "max_import_message_chars": 1000,
            "max_import_bytes": 64 << 20,
        },
    }


async def upload(
    client: httpx.AsyncClient, auth: dict[str, str], chat_id: str, data: bytes
) -> httpx.Response:
    return await client.post(
        f"/api/chats/{chat_id}/attachments",
        params={"filename": "a.pdf"},
        content=data,
        headers={**auth, "Content-Type": "application/octet-stream"},
    )


async def test_a_costly_pdf_is_refused_at_its_cpu_limit_and_leaves_nothing(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    r = await upload(run_client, auth, chat_id, COSTLY)
    error = assert_error(r, 422, "file_too_costly")
    assert "1 s of CPU" in error["message"]
    assert run_services.parsing.outcomes["cpu"] == 1
    files = await run_client.get(f"/api/chats/{chat_id}/attachments", headers=auth)
    assert files.json()["data"] == []
    # the pool goes on: the next file is read
    fine = await upload(run_client, auth, chat_id, pdf_bytes([["Hello there"]]))
    assert fine.status_code == 201, fine.text


async def test_a_pdf_over_the_page_limit_is_refused_before_its_pages_are_read(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    r = await upload(run_client, auth, chat_id, pdf_with_shared_stream(6, 10))
    assert "at most 5" in assert_error(r, 413, "too_many_pages")["message"]


async def test_a_user_has_at_most_per_user_files_read_at_once(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    answers = await asyncio.gather(*(upload(run_client, auth, chat_id, COSTLY) for _ in range(3)))
    codes = sorted(r.json()["error"]["code"] for r in answers)
    assert codes == ["file_too_costly", "file_too_costly", "too_many_parses"], codes
    refused = next(r for r in answers if r.status_code == 429)
    assert refused.headers["retry-after"]


async def test_a_parse_is_killed_when_its_client_goes_away(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    pool = run_services.parsing
    pool.settings = pool.settings.model_copy(update={"cpu_seconds": 120})
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    sending = asyncio.create_task(upload(run_client, auth, chat_id, COSTLY))
    await eventually(lambda: _true(pool.busy == 1), "the PDF to be parsed")
    sending.cancel()  # the client goes away
    await eventually(lambda: _true(pool.busy == 0), "the parse to end")
    assert pool.outcomes["cancelled"] == 1 and pool.outcomes["cpu"] == 0, pool.outcomes


async def _true(value: bool) -> bool:
    return value


async def _raw_request(base: str, head: str) -> bytes:
    """Send only a request's head (no body) and read what the server answers."""
    url = urlsplit(base)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(head.encode())
        await writer.drain()
        async with asyncio.timeout(10):
            return await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("path", "size"), [("/api/imports", 60 << 20), ("/api/chats/chat_x/attachments", 5 << 20)]
)
async def test_an_anonymous_body_is_answered_from_its_headers(
    run_client: httpx.AsyncClient, path: str, size: int
) -> None:
    """Under its route's limit, the body is not read: the 401 comes with no byte sent."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: parley.test\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n\r\n"
    )
    answer = await _raw_request(str(run_client.base_url), head)
    assert answer.startswith(b"HTTP/1.1 401"), answer


async def test_a_body_declared_over_the_limit_is_refused_before_it_is_read(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    head = (
        f"POST /api/imports HTTP/1.1\r\nHost: parley.test\r\n"
        f"Authorization: {auth['Authorization']}\r\nContent-Length: {65 << 20}\r\n\r\n"
    )
    answer = await _raw_request(str(run_client.base_url), head)
    assert answer.startswith(b"HTTP/1.1 413"), answer


async def test_an_import_is_read_off_the_event_loop(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    """/healthz answers while the import is being parsed (in the pool, not on the loop)."""
    auth = await user_headers(run_client, "ada@example.com")
    pool = run_services.parsing
    pool.settings = pool.settings.model_copy(update={"cpu_seconds": 60})
    body = chatgpt_conversations(400, 40, "x" * 400)
    importing = asyncio.create_task(
        run_client.post("/api/imports", content=body, headers=auth, timeout=120)
    )
    await eventually(lambda: _true(pool.busy == 1), "the import to be parsed")
    health = await run_client.get("/healthz", timeout=5)
    assert health.status_code == 200 and pool.busy == 1 and not importing.done()
    r = await importing
    assert r.status_code == 201, r.text
    assert (r.json()["chats"], r.json()["messages"]) == (400, 400 * 40)


async def test_a_zip_that_inflates_past_the_limit_is_refused(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    bomb = zip_bomb(64 << 20)
    assert len(bomb) < 200_000
    r = await run_client.post("/api/imports", content=bomb, headers=auth)
    assert "unpacks to more than" in assert_error(r, 422, "import_too_large")["message"]


@pytest.mark.parametrize(
    ("number", "problem"),
    [
        ("1" + "0" * 5000, "a number of 5001 digits"),
        ("-" + "9" * 41, "a number of 42 digits"),
        ("NaN", "NaN is not a JSON value"),
        ("-Infinity", "-Infinity is not a JSON value"),
    ],
)
async def test_an_import_with_a_number_json_cannot_hold_is_a_clear_422(
    run_client: httpx.AsyncClient, number: str, problem: str
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    one = json.loads(chatgpt_conversations(1, 2))
    text = json.dumps(one).replace('"create_time": 1700000000,', f'"create_time": {number},', 1)
    assert number in text
    r = await run_client.post("/api/imports", content=text.encode(), headers=auth)
    assert problem in assert_error(r, 422, "invalid_import")["message"]


async def test_an_imported_message_longer_than_the_limit_is_refused(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    r = await run_client.post(
        "/api/imports", content=chatgpt_conversations(2, 2, "y" * 2000), headers=auth
    )
    assert "at most 1000 are imported" in assert_error(r, 422, "import_too_large")["message"]
    assert (await run_client.get("/api/chats", headers=auth)).json()["data"] == []


async def test_one_s_own_export_imported_again_adds_nothing(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    first = await run_client.post("/api/imports", content=chatgpt_conversations(3, 2), headers=auth)
    assert first.status_code == 201 and first.json()["chats"] == 3, first.text
    export = await run_client.post("/api/exports", headers=auth)

    async def ready() -> dict[str, Any] | None:
        got = await run_client.get(f"/api/exports/{export.json()['id']}", headers=auth)
        body: dict[str, Any] = got.json()
        return body if body["status"] == "ready" else None

    link = (await eventually(ready, "the export"))["download_url"]
    archive = await run_client.get(link)
    assert archive.status_code == 200
    again = await run_client.post("/api/imports", content=archive.content, headers=auth)
    assert again.status_code == 201, again.text
    assert (again.json()["chats"], again.json()["skipped"]) == (0, 3)
    assert sorted(again.json()["skipped_chat_ids"]) == sorted(first.json()["chat_ids"])
    chats = (await run_client.get("/api/chats", headers=auth)).json()["data"]
    assert len(chats) == 3
