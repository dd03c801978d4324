"""Retrieval: a chat's older messages that bear on a new one, for its prompt.

By embedding similarity when an embeddings endpoint is configured (``context.embeddings``),
else, and whenever that endpoint fails, by full-text search (``store/search.py``). Either
way only the user's own messages of that chat, before the given seq, that go into prompts.
"""

from __future__ import annotations

import logging

from parley.context import embeddings
from parley.context.embeddings import EmbeddingsClient, EmbeddingsError
from parley.context.settings import ContextSettings
from parley.store.database import Database
from parley.store.schema import Message
from parley.store.search import search_messages

log = logging.getLogger(__name__)


class Retriever:
    """Ranks a chat's older messages against a new one; holds the embeddings client."""

    def __init__(self, client: EmbeddingsClient | None = None) -> None:
        self._client = client

    @classmethod
    def from_settings(cls, settings: ContextSettings) -> Retriever:
        configured = settings.embeddings
        return cls(EmbeddingsClient(configured) if configured is not None else None)

    @property
    def uses_embeddings(self) -> bool:
        return self._client is not None

    async def retrieve(
        self,
        db: Database,
        *,
        user_id: str,
        chat_id: str,
        query: str,
        before_seq: int,
        limit: int,
    ) -> list[Message]:
        """At most ``limit`` of the user's messages of the chat with ``seq < before_seq``
        that go into prompts, the most relevant to ``query`` first, detached with their
        columns loaded. Never raises for the embeddings endpoint: its failure is logged
        and full-text search answers instead. Opens short transactions of its own, none
        held while the endpoint answers: call it outside any (on SQLite, one would hold
        the process's write lock, which these wait for)."""
        if limit <= 0:
            return []
        if self._client is not None:
            try:
                return await embeddings.rank(
                    db,
                    self._client,
                    user_id=user_id,
                    chat_id=chat_id,
                    query=query,
                    before_seq=before_seq,
                    limit=limit,
                )
            except EmbeddingsError as e:
                log.warning("retrieval: embeddings failed, full-text search instead: %s", e)
        async with db.reads() as s:
            return await search_messages(
                s,
                user_id=user_id,
                chat_id=chat_id,
                query=query,
                before_seq=before_seq,
                limit=limit,
            )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
