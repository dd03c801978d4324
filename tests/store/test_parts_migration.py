"""Migration 0016 (``messages.parts``, the ``tool`` role) both ways, on both stacks: nothing
else of the chat is lost — its runs (which reference its messages), its search index (whose
triggers on SQLite a copied table would lose); a tool message is refused before it and
stored after; going down removes tool messages and parts only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError

from parley.domain import MessageRole, MessageStatus, RunStatus
from parley.engines.tools import ToolCall
from parley.store import chats, run_ends
from parley.store.database import Database
from parley.store.migrate import current_revision, upgrade
from parley.store.new_runs import create_run
from parley.store.parts import MessageParts
from parley.store.schema import Message, Run
from tests.store.test_search import (
    a_chat,
    a_user,
    downgrade,
    new_run,
    objects,
    say,
    say_at_0007,
    search,
)

TOOL = MessageRole.TOOL


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    yield database
    await database.dispose()


async def _runs(db: Database) -> int:
    async with db.transaction() as s:
        return int(await s.scalar(select(func.count()).select_from(Run)) or 0)


async def test_the_parts_migration_goes_down_and_up_and_loses_nothing_else(db: Database) -> None:
    user = await a_user(db)
    chat = await a_chat(db, user)
    async with db.transaction() as s:
        run = await create_run(s, new_run(user, chat, "Where do herons nest?"))
    called = MessageParts("they nest in trees", (ToolCall("call_1", "look", '{"q":"heron"}'),))
    outcome = run_ends.Outcome(status=RunStatus.COMPLETED, content="In trees.", parts=called)
    async with db.transaction() as s:
        assert await run_ends.finish(
            s, run_id=run.id, outcome=outcome, from_status=RunStatus.QUEUED
        )
    await say(db, user, chat, (TOOL, MessageStatus.COMPLETED, "heron result"))
    made, runs = await objects(db), await _runs(db)
    try:
        await downgrade(db, "0015")
        assert await current_revision(db) == "0015"
        assert await _runs(db) == runs  # no cascade from a dropped messages table
        assert await objects(db) == made  # the search index's tables and triggers
        with pytest.raises(IntegrityError):
            await say_at_0015_tool(db, user, chat)
        await say_at_0007(db, user, chat, "a heron while it was down")
    finally:
        await upgrade(db)
    assert await _runs(db) == runs and await objects(db) == made
    assert sorted(await search(db, user, chat, "heron")) == [
        "Where do herons nest?",
        "a heron while it was down",
    ]  # the tool message went with the column; the index follows the rows
    async with db.transaction() as s:
        answer = await s.get(Message, run.assistant_message_id)
    assert answer is not None and MessageParts.from_json(answer.parts) == MessageParts()
    await say(db, user, chat, (TOOL, MessageStatus.COMPLETED, "heron result again"))
    assert "heron result again" in await search(db, user, chat, "result")


async def say_at_0015_tool(db: Database, user_id: str, chat_id: str) -> None:
    insert = (
        "INSERT INTO messages (id, user_id, chat_id, seq, role, content, status, created_at, "
        "updated_at) VALUES (:id, :user, :chat, 999, 'tool', 'x', 'completed', "
        "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
    )
    async with db.transaction() as s:
        await s.execute(
            text(insert), {"id": chats.new_message_id(), "user": user_id, "chat": chat_id}
        )
