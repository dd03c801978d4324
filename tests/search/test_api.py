"""GET /api/search: one search box over all of a user's chats (titles and messages), on
SQLite (FTS5) and Postgres (tsvector), through the HTTP app."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from parley.domain import MessageRole, MessageStatus, utcnow
from parley.services import Services
from parley.store import chats
from parley.store.chat_search import unmark
from parley.store.schema import Chat, Message
from tests.helpers import assert_error, user_headers


async def new_chat(client: httpx.AsyncClient, headers: dict[str, str], title: str) -> str:
    r = await client.post("/api/chats", json={"title": title}, headers=headers)
    assert r.status_code == 201, r.text
    chat_id: str = r.json()["id"]
    return chat_id


async def say(
    svc: Services, chat_id: str, *contents: str, ago: timedelta = timedelta(0)
) -> list[Message]:
    """Messages appended to the chat (alternately the user's and answers), written ``ago``."""
    made = []
    async with svc.db.transaction() as s:
        chat = await s.get_one(Chat, chat_id)
        for i, content in enumerate(contents):
            at = utcnow() - ago
            role = MessageRole.USER if i % 2 == 0 else MessageRole.ASSISTANT
            message = Message(
                id=chats.new_message_id(),
                user_id=chat.user_id,
                chat_id=chat_id,
                role=role,
                status=MessageStatus.COMPLETED,
                content=content,
                created_at=at,
                updated_at=at,
            )
            made.append(await chats.add_message(s, message))
    return made


async def search(
    client: httpx.AsyncClient, headers: dict[str, str], q: str, **params: Any
) -> dict[str, Any]:
    r = await client.get("/api/search", params={"q": q, **params}, headers=headers)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def marked(hit: dict[str, Any]) -> list[str]:
    """The highlighted words of a hit."""
    chars = list(hit["snippet"])
    return ["".join(chars[a:b]) for a, b in hit["highlights"]]


@pytest.fixture
async def ada(client: httpx.AsyncClient) -> dict[str, str]:
    return await user_headers(client, "ada@example.com")


async def test_finds_a_word_from_an_old_chat_with_where_to_open_it(
    client: httpx.AsyncClient, services: Services, ada: dict[str, str]
) -> None:
    old = await new_chat(client, ada, "Garden plans")
    said = await say(
        services,
        old,
        "what grows in shade?",
        "Hostas and ferns like shade.",
        ago=timedelta(days=400),
    )
    other = await new_chat(client, ada, "Taxes")
    await say(services, other, "nothing green here")
    body = await search(client, ada, "ferns")
    [hit] = body["data"]
    assert body["next_cursor"] is None
    assert (hit["chat_id"], hit["message_id"], hit["seq"]) == (old, said[1].id, said[1].seq)
    assert hit["chat_title"] == "Garden plans" and hit["role"] == "assistant"
    assert hit["archived"] is False
    assert "Hostas and ferns" in hit["snippet"] and marked(hit) == ["ferns"]


async def test_words_match_their_other_forms(
    client: httpx.AsyncClient, services: Services, ada: dict[str, str]
) -> None:
    chat = await new_chat(client, ada, "Exercise")
    await say(services, chat, "I was running every morning")
    [hit] = (await search(client, ada, "runs"))["data"]
    assert marked(hit) == ["running"]


async def test_every_word_must_match_and_better_matches_come_first(
    client: httpx.AsyncClient, services: Services, ada: dict[str, str]
) -> None:
    chat = await new_chat(client, ada, "Notes")
    once, often, _ = await say(
        services,
        chat,
        "a volcano erupted near the village, which had a long history of festivals",
        "volcano volcano volcano village",
        "the village fair",
    )
    found = (await search(client, ada, "volcano village"))["data"]
    assert [h["message_id"] for h in found] == [often.id, once.id]
    assert sorted(set(marked(found[0]))) == ["village", "volcano"]


async def test_newest_first_among_equals_and_pages_by_cursor(
    client: httpx.AsyncClient, services: Services, ada: dict[str, str]
) -> None:
    chat = await new_chat(client, ada, "Log")
    made = []
    for day in range(5, 0, -1):  # the same text, a day apart: equal ranks
        made += await say(services, chat, "the kettle boiled", ago=timedelta(days=day))
    newest_first = [m.id for m in reversed(made)]
    seen: list[str] = []
    body = await search(client, ada, "kettle", limit=2)
    while True:
        assert len(body["data"]) <= 2
        seen += [h["message_id"] for h in body["data"]]
        if body["next_cursor"] is None:
            break
        body = await search(client, ada, "kettle", limit=2, cursor=body["next_cursor"])
    assert seen == newest_first
    first = await search(client, ada, "kettle", limit=2)
    r = await client.get(  # a cursor is bound to its query
        "/api/search", params={"q": "boiled", "cursor": first["next_cursor"]}, headers=ada
    )
    assert_error(r, 400, "invalid_cursor")


async def test_titles_are_found_and_rank_above_a_passing_mention(
    client: httpx.AsyncClient, services: Services, ada: dict[str, str]
) -> None:
    titled = await new_chat(client, ada, "Sourdough starter troubles")
    mention = await new_chat(client, ada, "Misc")
    await say(services, mention, "we talked about many things including sourdough once, briefly")
    found = (await search(client, ada, "sourdough"))["data"]
    assert (found[0]["chat_id"], found[0]["message_id"]) == (titled, None)
    assert found[0]["snippet"] == "Sourdough starter troubles"
    assert marked(found[0]) == ["Sourdough"]
    assert {h["chat_id"] for h in found} == {titled, mention}
    renamed = await client.patch(f"/api/chats/{titled}", json={"title": "Bread"}, headers=ada)
    assert renamed.status_code == 200
    assert [h["chat_id"] for h in (await search(client, ada, "sourdough"))["data"]] == [mention]
    assert [h["chat_id"] for h in (await search(client, ada, "bread"))["data"]] == [titled]


async def test_another_users_chats_never_appear(
    client: httpx.AsyncClient, services: Services, ada: dict[str, str]
) -> None:
    bob = await user_headers(client, "bob@example.com")
    bobs = await new_chat(client, bob, "Secret zeppelin plans")
    await say(services, bobs, "the zeppelin launches at dawn")
    assert (await search(client, ada, "zeppelin"))["data"] == []
    assert len((await search(client, bob, "zeppelin"))["data"]) == 2


async def test_deleted_chats_are_gone(
    client: httpx.AsyncClient, services: Services, ada: dict[str, str]
) -> None:
    chat = await new_chat(client, ada, "Walrus facts")
    await say(services, chat, "a walrus weighs a ton")
    assert len((await search(client, ada, "walrus"))["data"]) == 2
    assert (await client.delete(f"/api/chats/{chat}", headers=ada)).status_code == 200
    assert (await search(client, ada, "walrus"))["data"] == []


async def test_an_archived_chat_is_found_by_title_and_marked(
    client: httpx.AsyncClient, services: Services, ada: dict[str, str]
) -> None:
    chat = await new_chat(client, ada, "Quokka trip")
    await say(services, chat, "quokka selfies on the island", ago=timedelta(days=90))
    async with services.db.transaction() as s:
        row = await s.get_one(Chat, chat)
    assert await services.archiver.archive_chat(row)
    [hit] = (await search(client, ada, "quokka"))["data"]
    assert (hit["chat_id"], hit["message_id"], hit["archived"]) == (chat, None, True)
    assert (await search(client, ada, "selfies"))["data"] == []  # its messages: not until opened


@pytest.mark.parametrize(
    "q",
    ['"kettle', 'kettle" OR "x', "kettle*", "kettle AND", "(kettle", "-kettle", "kettle:*",
     "!kettle & |", "^kettle", "kettle\x00", "kettle's", "{kettle}", "kettle\\"],
)  # fmt: skip
async def test_query_syntax_characters_are_plain_text(
    client: httpx.AsyncClient, services: Services, ada: dict[str, str], q: str
) -> None:
    chat = await new_chat(client, ada, "Tea")
    await say(services, chat, "the kettle boiled")
    hits = (await search(client, ada, q))["data"]
    assert [h["chat_id"] for h in hits] == [chat]


@pytest.mark.parametrize("q", ["kettle NEAR(boiled a)", "content:kettle", "kett*"])
async def test_query_operators_are_words_too(
    client: httpx.AsyncClient, services: Services, ada: dict[str, str], q: str
) -> None:
    """NEAR, a column filter, a prefix: words to match like any other, never syntax."""
    chat = await new_chat(client, ada, "Tea")
    await say(services, chat, "the kettle boiled", "near the content, kettle boiled")
    hits = (await search(client, ada, q))["data"]
    expected = [] if q == "kett*" else [chat]
    assert [h["chat_id"] for h in hits] == expected


@pytest.mark.parametrize(
    ("q", "code"), [("", "query_empty"), ("   ", "query_empty"), ("the a", "query_empty"),
                    ("x" * 201, "query_too_long")]
)  # fmt: skip
async def test_a_query_with_nothing_to_find_or_too_long_is_refused(
    client: httpx.AsyncClient, ada: dict[str, str], q: str, code: str
) -> None:
    r = await client.get("/api/search", params={"q": q}, headers=ada)
    assert_error(r, 400, code)


async def test_needs_credentials(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/api/search", params={"q": "x"}), 401)


async def test_a_message_cannot_inject_markup_or_fake_highlights() -> None:
    text, ranges = unmark("a \ue000<b>x</b>\ue001 and a stray \ue001 \ue000")
    assert text == "a <b>x</b> and a stray  " and ranges == [(2, 10)]
