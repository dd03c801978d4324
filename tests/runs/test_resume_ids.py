"""Resuming by Last-Event-ID: only ASCII-digit ids the bus could have issued are taken (400
``invalid_last_event_id`` before any byte otherwise), and a finished run answers and closes
whatever id is given, even one past the end of its stream."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.helpers import assert_error
from tests.runs.helpers import new_chat, send_json, stored_message, wait_run
from tests.sse import Event, collect, text_of

BAD_IDS = [
    "\u00b2-0",  # a superscript two: str.isdigit() says it is a digit
    "0-\u00b2",
    "\u0661-0",  # an Arabic-Indic digit one
    "99999999999999999999-0",  # past 2**64 - 1, which Redis refuses
    "1-99999999999999999999",
    "-0",
    "1-",
    "1--1",
]
PAST_THE_END = f"{2**64 - 1}-{2**64 - 1}"


def _latin1(value: str) -> bytes | None:
    """The header bytes that arrive as ``value`` (headers are read as latin-1), if any."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return None


@pytest.mark.parametrize("last_id", BAD_IDS)
async def test_ids_that_are_not_ascii_digits_are_a_400_before_any_byte(
    run_client: httpx.AsyncClient, auth: dict[str, str], last_id: str
) -> None:
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id)
    url = f"/api/runs/{accepted['run_id']}/events"
    header = _latin1(last_id)
    if header is not None:
        async with asyncio.timeout(10):
            raw = {k.encode(): v.encode() for k, v in auth.items()}
            r = await run_client.get(url, headers={**raw, b"Last-Event-ID": header})
        assert_error(r, 400, "invalid_last_event_id")
    async with asyncio.timeout(10):
        r = await run_client.get(url, params={"last_event_id": last_id}, headers=auth)
    assert_error(r, 400, "invalid_last_event_id")
    # the run itself is fine, and the user's stream slots were all given back
    await wait_run(run_client, auth, accepted["run_id"])
    async with run_client.stream("GET", url, headers=auth) as ok:
        assert ok.status_code == 200
        assert (await collect(ok))[-1].event == "done"


async def _events_after(
    client: httpx.AsyncClient, auth: dict[str, str], run_id: str, last_id: str, *, query: bool
) -> list[Event]:
    params = {"last_event_id": last_id} if query else {}
    headers = auth if query else {**auth, "Last-Event-ID": last_id}
    async with asyncio.timeout(8):  # the relay pings every second here: never "forever"
        async with client.stream(
            "GET", f"/api/runs/{run_id}/events", headers=headers, params=params
        ) as r:
            assert r.status_code == 200
            return await collect(r)


@pytest.mark.parametrize("query", [False, True])
async def test_an_id_past_the_end_of_a_finished_run_gets_its_answer_and_done(
    run_client: httpx.AsyncClient, auth: dict[str, str], query: bool
) -> None:
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id)
    await wait_run(run_client, auth, accepted["run_id"])
    evs = await _events_after(run_client, auth, accepted["run_id"], PAST_THE_END, query=query)
    assert evs[-1].event == "done"
    assert evs[-1].data["status"] == "completed"
    message = await stored_message(run_client, auth, chat_id, accepted["message_id"])
    assert text_of(evs) == message["content"]


@pytest.mark.parametrize(
    "run_overrides",
    [{"fake_engine": {"time_to_first_token_ms": 1_500}, "ping_interval_seconds": 0.5}],
)
async def test_an_id_past_the_end_of_a_running_run_ends_when_the_run_does(
    run_client: httpx.AsyncClient, auth: dict[str, str], run_overrides: dict[str, Any]
) -> None:
    chat_id = await new_chat(run_client, auth)
    accepted = await send_json(run_client, auth, chat_id)
    evs = await _events_after(run_client, auth, accepted["run_id"], PAST_THE_END, query=False)
    assert evs[-1].event == "done"
    message = await stored_message(run_client, auth, chat_id, accepted["message_id"])
    assert message["status"] == "completed"
    assert text_of(evs) == message["content"]
