"""Paging cursors are signed: a cursor the server did not issue is a 400 ``invalid_cursor``,
whatever it holds (huge numbers, dates that overflow in UTC, bytes), never a 500; each kind's
decoder checks the types and ranges of the key it signed as well."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Coroutine
from datetime import UTC, timedelta, timezone
from typing import Any, TypeVar

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parley.domain import is_id
from parley.errors import InvalidRequest
from parley.services import Services
from parley.store import chats
from parley.store.pages import Cursors
from tests.helpers import assert_error

T = TypeVar("T")


def unsigned(*key: Any) -> str:
    """A cursor as the server used to make them: base64url(JSON), nothing to check it by."""
    raw = json.dumps(list(key)).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def _chat_with_messages(client: httpx.AsyncClient, auth: dict[str, str]) -> str:
    chat_id: str = (await client.post("/api/chats", json={}, headers=auth)).json()["id"]
    r = await client.post(
        f"/api/chats/{chat_id}/messages",
        json={"content": "hello"},
        headers={**auth, "Accept": "application/json"},
    )
    assert r.status_code == 202, r.text
    return chat_id


CRAFTED = [
    ("messages", unsigned(2**63), "asc"),
    ("messages", unsigned(2**63), "desc"),
    ("messages", unsigned(10**30), "asc"),
    ("messages", unsigned(10**30), "desc"),
    ("messages", unsigned(-(2**63) - 1), "asc"),
    ("messages", unsigned(-(2**63) - 1), "desc"),
    ("chats", unsigned("0001-01-01T00:00:00+01:00", "chat_x"), "desc"),
    ("chats", unsigned("9999-12-31T23:59:59-01:00", "chat_x"), "desc"),
]


@pytest.mark.parametrize(("listing", "cursor", "order"), CRAFTED)
async def test_crafted_cursors_are_400_not_500(
    client: httpx.AsyncClient, auth: dict[str, str], listing: str, cursor: str, order: str
) -> None:
    chat_id = await _chat_with_messages(client, auth)
    url = "/api/chats" if listing == "chats" else f"/api/chats/{chat_id}/messages"
    params = {"cursor": cursor} if listing == "chats" else {"cursor": cursor, "order": order}
    r = await client.get(url, params=params, headers=auth)
    assert assert_error(r, 400, "invalid_cursor")["param"] == "cursor"


async def test_a_cursor_only_pages_the_listing_it_was_issued_for(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    first = await _chat_with_messages(client, auth)
    second = await _chat_with_messages(client, auth)
    for _ in range(2):
        await client.post(
            f"/api/chats/{first}/messages",
            json={"content": "more"},
            headers={**auth, "Accept": "application/json"},
        )
    page = (await client.get(f"/api/chats/{first}/messages?limit=2", headers=auth)).json()
    cursor = page["next_cursor"]
    assert cursor
    ok = await client.get(f"/api/chats/{first}/messages?limit=2&cursor={cursor}", headers=auth)
    assert ok.status_code == 200 and len(ok.json()["data"]) == 2
    other = await client.get(
        f"/api/chats/{second}/messages", params={"cursor": cursor}, headers=auth
    )
    assert_error(other, 400, "invalid_cursor")
    assert_error(await client.get("/api/chats", params={"cursor": cursor}, headers=auth), 400)
    tampered = cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")
    r = await client.get(f"/api/chats/{first}/messages", params={"cursor": tampered}, headers=auth)
    assert_error(r, 400, "invalid_cursor")


# -- property tests: arbitrary bytes, numbers and dates at every decoder --------------------

_OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
_DATES = st.datetimes(timezones=st.one_of(st.none(), st.just(UTC), _OFFSETS)).map(
    lambda d: d.isoformat()
)
_SCALARS = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    _DATES,
    st.text(max_size=80),
    st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
    st.booleans(),
    st.none(),
)
KEYS = st.lists(st.one_of(_SCALARS, st.lists(_SCALARS, max_size=2)), max_size=3)
RAW = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=200).map(lambda b: base64.urlsafe_b64encode(b).decode()),
    KEYS.map(lambda key: unsigned(*key)),
    st.integers().map(unsigned),
    st.tuples(_DATES, st.text(max_size=30)).map(lambda key: unsigned(*key)),
)


async def _fuzz(
    strategy: st.SearchStrategy[T],
    check: Callable[[T], Coroutine[Any, Any, None]],
    examples: int = 120,
) -> None:
    """Hypothesis in a worker thread, each example checked over HTTP on this event loop."""
    loop = asyncio.get_running_loop()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def run(case: T) -> None:
        asyncio.run_coroutine_threadsafe(check(case), loop).result(timeout=30)

    await asyncio.to_thread(run)


def _no_server_error(r: httpx.Response) -> None:
    assert r.status_code < 500, r.text
    if r.status_code != 200:
        assert 400 <= r.status_code < 500, r.text


async def test_any_cursor_a_client_makes_up_is_a_4xx(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    chat_id = await _chat_with_messages(client, auth)

    async def check(case: tuple[str, str, str]) -> None:
        listing, cursor, order = case
        url = "/api/chats" if listing == "chats" else f"/api/chats/{chat_id}/messages"
        r = await client.get(url, params={"cursor": cursor, "order": order}, headers=auth)
        if len(cursor) <= 512:
            assert_error(r, 400, "invalid_cursor")
        else:
            assert_error(r, 422)

    cases = st.tuples(st.sampled_from(["chats", "messages"]), RAW, st.sampled_from(["asc", "desc"]))
    await _fuzz(cases, check)


async def test_a_signed_key_of_any_shape_is_a_page_or_a_400(
    client: httpx.AsyncClient, auth: dict[str, str], services: Services
) -> None:
    """Defence in depth: even a key signed with the server's secret is checked by its kind."""
    chat_id = await _chat_with_messages(client, auth)
    signer = Cursors(services.settings.secret_key.get_secret_value())

    async def check(case: tuple[str, list[Any], str]) -> None:
        listing, key, order = case
        if listing == "chats":
            url, cursor = "/api/chats", signer.seal("chats", key)
        else:
            url = f"/api/chats/{chat_id}/messages"
            cursor = signer.seal(chats.messages_cursor_kind(chat_id), key)
        r = await client.get(url, params={"cursor": cursor, "order": order}, headers=auth)
        _no_server_error(r)
        if len(cursor) > 512:  # longer than the documented parameter: refused as such
            assert_error(r, 422, "validation_error")
        elif r.status_code != 200:
            assert_error(r, 400, "invalid_cursor")

    cases = st.tuples(
        st.sampled_from(["chats", "messages"]), KEYS, st.sampled_from(["asc", "desc"])
    )
    await _fuzz(cases, check)


@pytest.mark.parametrize(("seq", "status"), [(2**31 - 1, 200), (2**31, 400), (2**63 - 1, 400)])
async def test_a_signed_history_key_past_the_seq_column_is_a_400(
    client: httpx.AsyncClient, auth: dict[str, str], services: Services, seq: int, status: int
) -> None:
    """Found by the property above under load: a seq past Postgres's INTEGER was a 500."""
    chat_id = await _chat_with_messages(client, auth)
    signer = Cursors(services.settings.secret_key.get_secret_value())
    cursor = signer.seal(chats.messages_cursor_kind(chat_id), [seq])
    r = await client.get(f"/api/chats/{chat_id}/messages", params={"cursor": cursor}, headers=auth)
    if status == 200:
        assert r.status_code == 200, r.text
    else:
        assert_error(r, 400, "invalid_cursor")


def _decoded(decode: Callable[[], T]) -> T | InvalidRequest:
    try:
        return decode()
    except InvalidRequest as e:
        return e


@settings(max_examples=300, deadline=None, database=None)
@given(key=KEYS, raw=RAW)
def test_the_decoders_answer_a_key_or_invalid_cursor(key: list[Any], raw: str) -> None:
    """Each kind's decoder: a value the database can take, or InvalidRequest (400)."""
    signer = Cursors("a secret")
    for cursor in (raw, signer.seal("chats", key), signer.seal("messages:chat_x", key)):
        position = _decoded(lambda: chats.chats_after(signer, cursor))  # noqa: B023
        if isinstance(position, InvalidRequest):
            assert (position.status_code, position.code) == (400, "invalid_cursor")
        else:
            at, chat_id = position
            assert at.utcoffset() == timedelta(0) and is_id("chat", chat_id)
        seq = _decoded(lambda: chats.messages_after(signer, "chat_x", cursor))  # noqa: B023
        if isinstance(seq, InvalidRequest):
            assert (seq.status_code, seq.code) == (400, "invalid_cursor")
        else:
            assert type(seq) is int and 0 <= seq < 2**63
