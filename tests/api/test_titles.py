"""Chat titles: a title of invisible characters only is refused; bidi controls in a title
with visible text are kept as written (the web UI isolates them when it shows the title)."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import assert_error

INVISIBLE = [
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u200b\u200b\u200b",  # zero-width spaces
    "\u2066\u2069\u200e\u200f",  # isolates and marks
    "\u3164\u115f",  # Hangul fillers
    "\u2800 \ufeff",  # braille blank, BOM
    "\u034f\ufe0f",  # grapheme joiner, variation selector
]


@pytest.mark.parametrize("title", INVISIBLE)
async def test_a_title_of_invisible_characters_is_refused(
    client: httpx.AsyncClient, auth: dict[str, str], title: str
) -> None:
    r = await client.post("/api/chats", json={"title": title}, headers=auth)
    assert assert_error(r, 422, "invalid_title")["param"] == "title"
    chat = (await client.post("/api/chats", json={"title": "fine"}, headers=auth)).json()
    r = await client.patch(f"/api/chats/{chat['id']}", json={"title": title}, headers=auth)
    assert assert_error(r, 422, "invalid_title")["param"] == "title"
    assert (await client.get(f"/api/chats/{chat['id']}", headers=auth)).json()["title"] == "fine"
    assert (await client.get("/api/chats", headers=auth)).json()["data"][0]["title"] == "fine"


async def test_bidi_controls_beside_visible_text_are_kept(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    title = "invoice \u202egnp.exe"
    r = await client.post("/api/chats", json={"title": title}, headers=auth)
    assert r.status_code == 201
    assert r.json()["title"] == title


async def test_a_chat_titled_from_its_message_takes_its_first_visible_line(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    """The one title rule (``parley.text.title_from``): the web UI's new chats use it."""
    made = await client.post(
        "/api/chats", json={"title_from": "\u200b\n  Plan   the\ttrip \nsecond line"}, headers=auth
    )
    assert made.status_code == 201 and made.json()["title"] == "Plan the trip"
    long = await client.post("/api/chats", json={"title_from": "w" * 100}, headers=auth)
    assert long.json()["title"] == "w" * 59 + "…"
    blank = await client.post("/api/chats", json={"title_from": "\u200b\n \n"}, headers=auth)
    assert blank.json()["title"] == "New chat"
    both = await client.post("/api/chats", json={"title": "a", "title_from": "b"}, headers=auth)
    assert assert_error(both, 422, "invalid_title")["param"] == "title_from"
