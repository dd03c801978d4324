"""Retrieval (``context/retrieval.py``): full-text search without an embeddings endpoint;
with one, ranking by a real HTTP endpoint's vectors, cached per message, and full-text
search again whenever that endpoint fails. On SQLite and on Postgres. Retrieval opens short
transactions of its own and holds none while the endpoint answers (on SQLite every
transaction holds the process's one write lock), and what it returns outlives its sessions.

The endpoint is a real HTTP server on a thread: a bag-of-words embedding over hashed words,
with a few synonyms (``feline`` is ``cat``) so that meaning can be told from shared words.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy import delete, func, insert, inspect, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import load_settings
from parley.context.embeddings import EmbeddingsClient
from parley.context.retrieval import Retriever
from parley.context.settings import EmbeddingsSettings
from parley.domain import MessageRole, MessageStatus, utcnow
from parley.store import embeddings as cache
from parley.store.database import Database
from parley.store.embeddings import message_embeddings
from parley.store.schema import Message
from tests.store.test_search import CAT, FILLER, a_chat, a_user, say

DIMS = 256
SYNONYMS = {"feline": "cat", "kitty": "cat", "named": "called", "name": "called"}
IGNORED = {"what", "is", "my", "the", "a", "of", "it", "in"}
ALL = 2**31 - 1


def embed(text: str) -> list[float]:
    """A deterministic bag-of-words vector: each word (its synonym's) counted in a dimension
    chosen by its hash."""
    vector = [0.0] * DIMS
    for word in re.findall(r"[a-z]+", text.lower()):
        word = SYNONYMS.get(word, word)
        if word not in IGNORED:
            vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMS] += 1.0
    return vector


@dataclass
class Endpoint:
    """The embeddings server's state: how it answers, and what it was asked."""

    url: str = ""
    mode: str = "ok"
    requests: list[list[str]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    asked: threading.Event = field(default_factory=threading.Event)  # a request came (hold)
    release: threading.Event = field(default_factory=threading.Event)  # now answer it (hold)

    def answer(self, inputs: list[str]) -> tuple[int, Any]:
        data = [
            {"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(inputs)
        ]
        data.reverse()  # out of order: the client orders by index
        if self.mode == "error":
            return 500, {"error": {"message": "boom"}}
        if self.mode == "malformed":
            return 200, {"data": "nope"}
        if self.mode == "short":
            return 200, {"data": data[1:]}
        if self.mode == "nan":
            data[0]["embedding"] = [float("nan")] * DIMS
        if self.mode == "slow":
            time.sleep(1.0)
        if self.mode == "hold":  # answers once released (or after 5 s, whatever happens)
            self.asked.set()
            self.release.wait(5.0)
        return 200, {"object": "list", "data": data, "model": "bow"}


def handler_for(endpoint: Endpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/embeddings":
                status, reply = 404, {"error": "not found"}
            else:
                endpoint.requests.append(list(body["input"]))
                endpoint.headers.append(dict(self.headers))
                status, reply = endpoint.answer(body["input"])
            raw = json.dumps(reply).encode()
            with contextlib.suppress(OSError):  # the client gave up waiting (the slow mode)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    state = Endpoint()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    yield database
    await database.dispose()


def retriever(url: str | None, **embeddings: Any) -> Retriever:
    if url is None:
        return Retriever.from_settings(load_settings().context)
    configured = {"base_url": url, "model": "bow", "api_key": "sk-test", **embeddings}
    return Retriever.from_settings(load_settings(context={"embeddings": configured}).context)


async def retrieve(
    db: Database,
    r: Retriever,
    user_id: str,
    chat_id: str,
    query: str,
    before_seq: int = ALL,
    limit: int = 3,
) -> list[str]:
    found = await r.retrieve(
        db, user_id=user_id, chat_id=chat_id, query=query, before_seq=before_seq, limit=limit
    )
    return [m.content for m in found]


async def cached(db: Database) -> list[tuple[str, str, int]]:
    """The cache's rows: (message id, model, dims)."""
    async with db.transaction() as s:
        rows = await s.execute(
            select(
                message_embeddings.c.message_id,
                message_embeddings.c.model,
                message_embeddings.c.dims,
            )
        )
        return [(row[0], row[1], row[2]) for row in rows]


QUESTION = "what is my feline named?"  # no word in common with CAT


async def test_without_an_endpoint_retrieval_is_full_text_search(db: Database) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(db, user, chat, CAT, *FILLER)
    r = retriever(None)
    try:
        assert not r.uses_embeddings
        assert await retrieve(db, r, user, chat, "what is my cat called?") == [CAT]
        assert await retrieve(db, r, user, chat, QUESTION) == []
        assert await retrieve(db, r, user, chat, "cat", limit=0) == []
    finally:
        await r.close()


async def test_the_endpoint_ranks_by_meaning(db: Database, endpoint: Endpoint) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(db, user, chat, CAT, *FILLER)
    r = retriever(endpoint.url)
    try:
        assert r.uses_embeddings
        found = await retrieve(db, r, user, chat, QUESTION, limit=2)
    finally:
        await r.close()
    assert found[0] == CAT and len(found) == 2
    assert endpoint.requests[0][0] == QUESTION
    assert endpoint.headers[0]["Authorization"] == "Bearer sk-test"


async def test_vectors_are_cached_per_message(db: Database, endpoint: Endpoint) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    made = await say(
        db,
        user,
        chat,
        CAT,
        (MessageRole.ASSISTANT, MessageStatus.IN_PROGRESS, ""),
        *FILLER,
    )
    r = retriever(endpoint.url, max_batch=2)
    try:
        await retrieve(db, r, user, chat, QUESTION)
        newest_first = [m.content for m in reversed(made) if m.content]
        assert endpoint.requests == [
            [QUESTION, newest_first[0]],
            newest_first[1:3],
            newest_first[3:],
        ]
        assert {row[0] for row in await cached(db)} == {m.id for m in made if m.content}
        endpoint.requests.clear()
        assert (await retrieve(db, r, user, chat, "kitty"))[0] == CAT
        assert endpoint.requests == [["kitty"]]  # the messages' vectors were kept
        async with db.transaction() as s:  # the answer ends: now it counts, and is embedded
            await s.execute(
                update(Message)
                .where(Message.id == made[1].id)
                .values(
                    content="Bartholomew is a fine feline name.", status=MessageStatus.COMPLETED
                )
            )
        endpoint.requests.clear()
        found = await retrieve(db, r, user, chat, "feline", limit=2)
        assert endpoint.requests == [["feline", "Bartholomew is a fine feline name."]]
        assert set(found) == {CAT, "Bartholomew is a fine feline name."}
    finally:
        await r.close()


async def test_another_model_embeds_again(db: Database, endpoint: Endpoint) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(db, user, chat, CAT, *FILLER)
    for model in ("bow", "bow-2"):
        r = retriever(endpoint.url, model=model)
        try:
            endpoint.requests.clear()
            assert (await retrieve(db, r, user, chat, QUESTION))[0] == CAT
        finally:
            await r.close()
        assert len(endpoint.requests[0]) == 1 + 4
        assert sorted(row[1] for row in await cached(db)) == [model] * 4


async def test_the_endpoint_ranks_only_the_users_chat_before_the_seq(
    db: Database, endpoint: Endpoint
) -> None:
    ada, bob = await a_user(db, "ada@example.com"), await a_user(db, "bob@example.com")
    adas, adas_other, bobs = await a_chat(db, ada), await a_chat(db, ada), await a_chat(db, bob)
    mine = await say(db, ada, adas, "my kitty Bartholomew", "the weather", "my cat again")
    await say(db, ada, adas_other, "another cat of mine")
    await say(db, bob, bobs, "Bob's cat")
    r = retriever(endpoint.url)
    try:
        found = await retrieve(db, r, ada, adas, "cat", before_seq=mine[2].seq, limit=10)
        assert found == ["my kitty Bartholomew", "the weather"]
        assert await retrieve(db, r, bob, adas, "cat", limit=10) == []  # Bob naming Ada's chat
    finally:
        await r.close()
    embedded = {text for request in endpoint.requests for text in request}
    assert embedded == {"cat", "my kitty Bartholomew", "the weather"}


async def test_a_vector_that_cannot_be_cached_costs_nothing_else(
    db: Database,
    endpoint: Endpoint,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A write refused by the database (here: a row for a message that does not exist) is
    undone alone: the ranking stands and the database goes on."""

    async def refused(s: AsyncSession, *, model: str, vectors: Any) -> None:
        await s.execute(
            insert(message_embeddings).values(
                message_id="msg_gone",
                user_id="u",
                chat_id="c",
                model=model,
                dims=1,
                vector=b"\0\0\0\0",
                created_at=utcnow(),
            )
        )

    monkeypatch.setattr(cache, "store", refused)
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(db, user, chat, CAT, *FILLER)
    r = retriever(endpoint.url)
    try:
        assert await retrieve(db, r, user, chat, QUESTION, limit=1) == [CAT]
    finally:
        await r.close()
    async with db.transaction() as s:
        assert await s.scalar(select(func.count()).select_from(Message)) == 4
    assert await cached(db) == []
    assert any("could not cache" in rec.getMessage() for rec in caplog.records)


async def test_no_transaction_is_held_while_the_endpoint_answers(
    db: Database, endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    """While the endpoint holds its answer, another transaction writes (on SQLite it would
    wait for the process's one write lock were retrieval holding it): here it deletes a
    message being embedded, whose vector is then skipped; the others are cached."""
    user = await a_user(db)
    chat = await a_chat(db, user)
    made = await say(db, user, chat, CAT, *FILLER)
    endpoint.mode = "hold"
    r = retriever(endpoint.url, timeout_seconds=10)
    try:
        pending = asyncio.create_task(
            r.retrieve(db, user_id=user, chat_id=chat, query=QUESTION, before_seq=ALL, limit=2)
        )
        assert await asyncio.to_thread(endpoint.asked.wait, 5.0)
        try:
            async with asyncio.timeout(2.0):  # would wait for the endpoint's 5 s, or forever
                async with db.transaction() as s:
                    await s.execute(delete(Message).where(Message.id == made[-1].id))
            assert not pending.done()  # the endpoint still holds its answer
        finally:
            endpoint.release.set()
        found = await pending
    finally:
        await r.close()
    assert endpoint.requests[0] == [QUESTION, *(m.content for m in reversed(made))]
    assert found[0].content == CAT
    assert {row[0] for row in await cached(db)} == {m.id for m in made[:-1]}
    assert not any("could not cache" in rec.getMessage() for rec in caplog.records)


async def test_the_messages_found_outlive_their_sessions(db: Database, endpoint: Endpoint) -> None:
    """What retrieval returns is read in transactions now over: detached, its columns
    loaded (a prompt reads seq, role and content)."""
    user = await a_user(db)
    chat = await a_chat(db, user)
    made = await say(db, user, chat, CAT, *FILLER)
    for url in (None, endpoint.url):  # full-text search, embeddings
        r = retriever(url)
        try:
            found = await r.retrieve(
                db, user_id=user, chat_id=chat, query="my cat", before_seq=ALL, limit=1
            )
        finally:
            await r.close()
        assert len(found) == 1 and inspect(found[0]).detached
        assert (found[0].seq, found[0].role, found[0].content) == (
            made[0].seq,
            MessageRole.USER,
            CAT,
        )


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize("mode", ["error", "malformed", "short", "nan", "slow", "closed"])
async def test_a_failing_endpoint_falls_back_to_full_text_search(
    db: Database, endpoint: Endpoint, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    await say(db, user, chat, CAT, "I called my mother yesterday.", *FILLER)
    endpoint.mode = mode
    r = retriever(closed_port_url() if mode == "closed" else endpoint.url, timeout_seconds=0.2)
    try:
        with caplog.at_level(logging.WARNING, logger="parley.context.retrieval"):
            found = await retrieve(db, r, user, chat, "what is my cat called?")
    finally:
        await r.close()
    assert found == [CAT, "I called my mother yesterday."]
    assert any("full-text search instead" in rec.getMessage() for rec in caplog.records)
    assert await cached(db) == []
    assert (mode == "closed") == (endpoint.requests == [])


async def test_an_empty_chat_asks_the_endpoint_nothing(db: Database, endpoint: Endpoint) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    r = retriever(endpoint.url)
    try:
        assert await retrieve(db, r, user, chat, QUESTION) == []
        assert await retrieve(db, r, user, chat, "cat", limit=0) == []
    finally:
        await r.close()
    assert endpoint.requests == []


async def test_the_client_orders_vectors_by_index(endpoint: Endpoint) -> None:
    client = EmbeddingsClient(EmbeddingsSettings(base_url=endpoint.url, model="bow", max_batch=3))
    try:
        texts = [f"text number {i} cat" * (i + 1) for i in range(7)]
        assert await client.embed(texts) == [embed(t) for t in texts]
        assert [len(r) for r in endpoint.requests] == [3, 3, 1]
    finally:
        await client.close()
