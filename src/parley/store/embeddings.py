"""The embeddings cache: one vector per message, for the configured embeddings model.

A message that goes into prompts never changes once it has ended (an answer's content is
written when it ends, and only then does it count: ``domain.in_prompt``), so its vector is
computed once and kept until the message is deleted (``ON DELETE CASCADE``) or another
model is configured (a vector of another model counts as missing and is replaced).
Vectors are stored as little-endian float32 bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import (
    Column,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Table,
    and_,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import in_prompt, utcnow
from parley.store.schema import ID, Base, Message, UTCDateTime
from parley.store.search import in_prompt_clause

message_embeddings = Table(
    "message_embeddings",
    Base.metadata,
    Column("message_id", ID, ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True),
    Column("user_id", ID, nullable=False),
    Column("chat_id", ID, nullable=False),
    Column("model", String(200), nullable=False),
    Column("dims", Integer, nullable=False),
    Column("vector", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

Vector = np.ndarray[tuple[int], np.dtype[np.float32]]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One of a chat's messages retrieval may rank, and its cached vector (None: none yet,
    or one of another model)."""

    message: Message
    vector: Vector | None


def to_bytes(vector: Vector) -> bytes:
    return vector.astype("<f4").tobytes()


def from_bytes(data: bytes, dims: int) -> Vector | None:
    """The stored vector, or None if it is not ``dims`` float32 values."""
    if len(data) != 4 * dims:
        return None
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


async def candidates(
    s: AsyncSession, *, user_id: str, chat_id: str, before_seq: int, model: str, limit: int
) -> list[Candidate]:
    """The user's messages of the chat before ``before_seq`` that go into prompts, newest
    first (at most ``limit``), each with its vector of ``model`` if one is cached."""
    cached = and_(
        message_embeddings.c.message_id == Message.id,
        message_embeddings.c.user_id == user_id,
        message_embeddings.c.model == model,
    )
    rows = await s.execute(
        select(Message, message_embeddings.c.vector, message_embeddings.c.dims)
        .outerjoin(message_embeddings, cached)
        .where(
            Message.user_id == user_id,
            Message.chat_id == chat_id,
            Message.seq < before_seq,
            in_prompt_clause(),
        )
        .order_by(Message.seq.desc())
        .limit(limit)
    )
    return [
        Candidate(message, None if data is None else from_bytes(data, dims))
        for message, data, dims in rows
        if in_prompt(message.role, message.status, message.content)
    ]


async def store(s: AsyncSession, *, model: str, vectors: Sequence[tuple[Message, Vector]]) -> None:
    """Cache each message's vector of ``model``, replacing any other (another process may
    have cached the same message meanwhile: the last one wins, never a conflict). The
    vectors are computed outside any transaction: a message deleted since is skipped."""
    if not vectors:
        return
    ids = {m.id for m, _ in vectors}
    kept = set(await s.scalars(select(Message.id).where(Message.id.in_(ids))))
    now = utcnow()
    rows = [
        {
            "message_id": m.id,
            "user_id": m.user_id,
            "chat_id": m.chat_id,
            "model": model,
            "dims": len(v),
            "vector": to_bytes(v),
            "created_at": now,
        }
        for m, v in vectors
        if m.id in kept
    ]
    if not rows:
        return
    dialect = postgresql if s.get_bind().dialect.name == "postgresql" else sqlite
    insert = dialect.insert(message_embeddings)
    replace = {c: insert.excluded[c] for c in ("model", "dims", "vector", "created_at")}
    await s.execute(insert.on_conflict_do_update(index_elements=["message_id"], set_=replace), rows)
