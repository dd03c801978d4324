"""Shared links: a read-only snapshot of a chat's shown branch at an unguessable token.

The owner's queries are scoped by user (another user's share does not exist for them); the
one public query, by token, finds a link only while it is not revoked and its chat exists
(deleting the chat deletes its links too: ``ON DELETE CASCADE``).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import MessageRole, MessageStatus, in_prompt, is_id, new_id, utcnow
from parley.errors import NotFound, no_such
from parley.store.branches import Node, build_tree
from parley.store.parts import MessageParts
from parley.store.schema import Chat, Message, Share

TOKEN_BYTES = 24  # secrets.token_urlsafe: 32 characters, 192 random bits
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,64}")
_SHOWN_ROLES = frozenset({MessageRole.USER, MessageRole.ASSISTANT, MessageRole.TOOL})


@dataclass(frozen=True, slots=True)
class SharedMessage:
    role: str
    content: str
    created_at: datetime
    model: str | None
    # an answer's reasoning and calls, the call a tool's result answers (``MessageParts.wire``)
    parts: dict[str, Any] | None = None
    stopped: bool = False  # an answer its user stopped: what it had said, marked so


def share_not_found(share_id: str) -> NotFound:
    return no_such("share", share_id, code="share_not_found", param="share_id")


def link_not_found(token: str) -> NotFound:
    return no_such("shared link", token, code="share_not_found", param="token")


def shown_path(messages: Sequence[Message], leaf_id: str | None) -> list[Message]:
    """The messages of the branch the chat shows (root first). Rows without parents (an
    archive written before branches) are one branch: all of them, in ``seq`` order."""
    ordered = sorted(messages, key=lambda m: m.seq)
    if all(m.parent_id is None for m in ordered):
        return ordered
    by_id = {m.id: m for m in ordered}
    tree = build_tree([Node(m.id, m.parent_id, m.seq) for m in ordered], leaf_id)
    return [by_id[i] for i in tree.path_ids]


def snapshot_of(path: Sequence[Message], *, tool_output: bool = False) -> list[SharedMessage]:
    """What a reader of the link sees: the user's messages and the answers a prompt would
    carry (completed, or stopped after saying something); no refused prompts, no answers
    still being written, failed or refused. A server tool's steps show its name and status,
    and (``tool_output``: the owner chose so) its arguments and result."""
    return [
        SharedMessage(
            m.role.value,
            m.content,
            m.created_at,
            m.model,
            shared_parts(MessageParts.from_json(m.parts), tool_output=tool_output) or None,
            m.status is MessageStatus.CANCELLED,
        )
        for m in path
        if m.role in _SHOWN_ROLES
        and m.status is not MessageStatus.REJECTED
        and in_prompt(m.role, m.status, m.content)
    ]


def shared_parts(parts: MessageParts, *, tool_output: bool = False) -> dict[str, Any]:
    """What a shared page shows of a message's parts: that a server tool ran (its name and
    status), and what it was given and gave back only if the owner chose so."""
    out = parts.wire()
    if parts.steps and not tool_output:
        out["tool_steps"] = [{"name": s.call.name, "status": s.status} for s in parts.steps]
    return out


async def chat_messages(s: AsyncSession, chat: Chat) -> list[Message]:
    """Every message row of a (not archived) chat, oldest first."""
    rows = await s.scalars(
        select(Message)
        .where(Message.user_id == chat.user_id, Message.chat_id == chat.id)
        .order_by(Message.seq)
    )
    return list(rows)


async def create_share(s: AsyncSession, *, chat: Chat, messages: Sequence[SharedMessage]) -> Share:
    share = Share(
        id=new_id("share"),
        user_id=chat.user_id,
        chat_id=chat.id,
        token=secrets.token_urlsafe(TOKEN_BYTES),
        title=chat.title,
        snapshot=json.dumps([_encode(m) for m in messages], ensure_ascii=False),
        message_count=len(messages),
        created_at=utcnow(),
    )
    s.add(share)
    await s.flush()
    return share


async def list_shares(s: AsyncSession, *, user_id: str) -> list[Share]:
    """The user's live links (revoked ones are gone), newest first."""
    rows = await s.scalars(
        select(Share)
        .where(Share.user_id == user_id, Share.revoked_at.is_(None))
        .order_by(Share.created_at.desc(), Share.id.desc())
    )
    return list(rows)


async def revoke_share(s: AsyncSession, *, user_id: str, share_id: str) -> Share:
    """Revoke the user's live link; NotFound for another user's, a revoked one or no such."""
    if not is_id("share", share_id):
        raise share_not_found(share_id)
    share = await s.scalar(
        select(Share).where(
            Share.user_id == user_id, Share.id == share_id, Share.revoked_at.is_(None)
        )
    )
    if share is None:
        raise share_not_found(share_id)
    share.revoked_at = utcnow()
    await s.flush()
    return share


async def shared(s: AsyncSession, token: str) -> tuple[Share, list[SharedMessage]]:
    """The link's snapshot (no credentials): NotFound unless the token is a live link to a
    chat that still exists."""
    if not _TOKEN.fullmatch(token):
        raise link_not_found(token)
    share = await s.scalar(
        select(Share)
        .join(Chat, (Chat.id == Share.chat_id) & (Chat.user_id == Share.user_id))
        .where(Share.token == token, Share.revoked_at.is_(None))
    )
    if share is None:
        raise link_not_found(token)
    return share, [_decode(raw) for raw in json.loads(share.snapshot)]


def _encode(m: SharedMessage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "role": m.role,
        "content": m.content,
        "created_at": m.created_at.isoformat(),
        "model": m.model,
    }
    if m.parts:
        out["parts"] = m.parts
    if m.stopped:
        out["stopped"] = True
    return out


def _decode(raw: dict[str, Any]) -> SharedMessage:
    model = raw.get("model")
    return SharedMessage(
        role=str(raw["role"]),
        content=str(raw["content"]),
        created_at=datetime.fromisoformat(str(raw["created_at"])),
        model=None if model is None else str(model),
        parts=parts if isinstance(parts := raw.get("parts"), dict) and parts else None,
        stopped=raw.get("stopped") is True,
    )
