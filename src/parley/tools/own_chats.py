"""The user's own chats as tools: ``search_chats`` (the search the web UI uses, over every
chat of the run's user; an archived chat by its title) and ``read_message`` (one message
of theirs, read from its archive when its chat is archived). Every query is scoped to the context's
user: another user's chat or message is "not found", exactly as the API answers it."""

from __future__ import annotations

from typing import Any

from parley.archive.archiver import Archiver
from parley.engines.tools import FunctionSpec, ToolSpec
from parley.errors import InvalidRequest, NotFound
from parley.store import chats
from parley.store.chat_search import Hit, search_chats
from parley.store.database import Database
from parley.store.pages import Cursors
from parley.store.schema import Message
from parley.tools.interface import ToolContext, ToolOutcome, ToolStatus

HITS = 8
MESSAGE_CHARS = 8_000

SEARCH = ToolSpec(
    type="function",
    function=FunctionSpec(
        name="search_chats",
        description="Search the user's earlier chats; each hit names its chat and message.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": 200}},
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
)
READ = ToolSpec(
    type="function",
    function=FunctionSpec(
        name="read_message",
        description="Read one message of the user's chats, as search_chats named it.",
        parameters={
            "type": "object",
            "properties": {
                "chat_id": {"type": "string", "maxLength": 64},
                "message_id": {"type": "string", "maxLength": 64},
            },
            "required": ["chat_id", "message_id"],
            "additionalProperties": False,
        },
    ),
)


class SearchChats:
    def __init__(self, db: Database, cursors: Cursors) -> None:
        self._db, self._cursors = db, cursors

    @property
    def spec(self) -> ToolSpec:
        return SEARCH

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        query = arguments.get("query")
        if not isinstance(query, str):
            return ToolOutcome.refused("search_chats needs a query")
        try:
            async with self._db.transaction() as s:
                page = await search_chats(
                    s,
                    user_id=context.user_id,
                    query=query,
                    limit=HITS,
                    cursor=None,
                    cursors=self._cursors,
                )
        except InvalidRequest as e:
            return ToolOutcome.refused(e.message)
        hits = [h for h in page.items if h.message_id is None or h.message_id != context.message_id]
        if not hits:  # (the message that asked is not an answer to itself)
            return ToolOutcome(ToolStatus.OK, f"no chat of the user's matches {query!r}")
        return ToolOutcome(ToolStatus.OK, "\n".join(_hit(h) for h in hits))


def _hit(hit: Hit) -> str:
    where = f"chat {hit.chat_id} ({hit.chat_title!r})"
    if hit.message_id is None:
        return f"- {where}: its title matches"
    when = hit.created_at.date().isoformat()
    return f"- {where}, message {hit.message_id} ({hit.role}, {when}): {hit.snippet}"


class ReadMessage:
    def __init__(self, db: Database, archiver: Archiver) -> None:
        self._db, self._archiver = db, archiver

    @property
    def spec(self) -> ToolSpec:
        return READ

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        chat_id, message_id = arguments.get("chat_id"), arguments.get("message_id")
        if not isinstance(chat_id, str) or not isinstance(message_id, str):
            return ToolOutcome.refused("read_message needs a chat_id and a message_id")
        try:
            message = await self._message(context.user_id, chat_id, message_id)
        except NotFound:
            return ToolOutcome.refused(f"no message {message_id} in a chat {chat_id} of the user's")
        text = message.content[:MESSAGE_CHARS]
        cut = " (cut short)" if len(message.content) > MESSAGE_CHARS else ""
        when = message.created_at.date().isoformat()
        return ToolOutcome(ToolStatus.OK, f"{message.role.value}, {when}{cut}:\n{text}")

    async def _message(self, user_id: str, chat_id: str, message_id: str) -> Message:
        async with self._db.transaction() as s:
            chat = await chats.get_chat(s, user_id=user_id, chat_id=chat_id)
            if chat.archive_key is None:
                return await chats.get_message(
                    s, user_id=user_id, chat_id=chat_id, message_id=message_id
                )
        archived = await self._archiver.read(chat)
        for message in archived.messages:
            if message.id == message_id:
                return message
        raise NotFound("no such message")
