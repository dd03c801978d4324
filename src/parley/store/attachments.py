"""Queries on attachments, scoped by user first: a chat's files waiting for its next
message, linking them to the message they are sent with, and the files a prompt holds."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import is_id
from parley.errors import Conflict, NotFound, no_such
from parley.store.schema import Attachment, Message

ID_PREFIX = "file"


class AttachmentSent(Conflict):
    code = "attachment_sent"


def not_found(attachment_id: str) -> NotFound:
    return no_such("attachment", attachment_id, code="attachment_not_found", param="id")


async def add(s: AsyncSession, attachment: Attachment) -> None:
    s.add(attachment)
    await s.flush()


async def get(s: AsyncSession, *, user_id: str, attachment_id: str) -> Attachment:
    """The user's attachment, or NotFound (another user's does not exist for this one)."""
    if not is_id(ID_PREFIX, attachment_id):
        raise not_found(attachment_id)
    found = await s.scalar(
        select(Attachment).where(Attachment.user_id == user_id, Attachment.id == attachment_id)
    )
    if found is None:
        raise not_found(attachment_id)
    return found


async def of_chat(s: AsyncSession, *, user_id: str, chat_id: str) -> list[Attachment]:
    """A chat's attachments, oldest first (sent ones and those waiting)."""
    query = select(Attachment).where(Attachment.user_id == user_id, Attachment.chat_id == chat_id)
    return list(await s.scalars(query.order_by(Attachment.created_at, Attachment.id)))


async def waiting(s: AsyncSession, *, user_id: str, chat_id: str) -> int:
    """How many of the chat's files wait for its next message."""
    count = await s.scalar(
        select(func.count())
        .select_from(Attachment)
        .where(
            Attachment.user_id == user_id,
            Attachment.chat_id == chat_id,
            Attachment.message_id.is_(None),
        )
    )
    return int(count or 0)


async def of_messages(
    s: AsyncSession, *, user_id: str, message_ids: Sequence[str]
) -> dict[str, list[Attachment]]:
    """The attachments of these messages, by message id."""
    if not message_ids:
        return {}
    rows = await s.scalars(
        select(Attachment)
        .where(Attachment.user_id == user_id, Attachment.message_id.in_(list(message_ids)))
        .order_by(Attachment.created_at, Attachment.id)
    )
    found: dict[str, list[Attachment]] = {}
    for row in rows:
        found.setdefault(row.message_id or "", []).append(row)
    return found


async def remove(s: AsyncSession, attachment: Attachment) -> None:
    await s.execute(delete(Attachment).where(Attachment.id == attachment.id))


async def link(
    s: AsyncSession, *, user_id: str, chat_id: str, message_id: str, ids: Sequence[str]
) -> None:
    """The chat's waiting files ``ids`` attached to its new message (in the transaction
    that writes it): NotFound for an id not among the chat's files, AttachmentSent for one
    sent with another message already (or by a concurrent send)."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return
    rows = await pending(s, user_id=user_id, chat_id=chat_id, ids=wanted, waiting_only=False)
    known = {row.id: row for row in rows}
    for attachment_id in wanted:
        if attachment_id not in known:
            raise no_such(
                "attachment", attachment_id, code="attachment_not_found", param="attachment_ids"
            )
        if known[attachment_id].message_id is not None:
            raise _sent(attachment_id)
    done = await s.execute(
        update(Attachment)
        .where(Attachment.id.in_(wanted), Attachment.message_id.is_(None))
        .values(message_id=message_id)
    )
    if getattr(done, "rowcount", len(wanted)) != len(wanted):
        raise _sent(wanted[0])


async def pending(
    s: AsyncSession, *, user_id: str, chat_id: str, ids: Sequence[str], waiting_only: bool = True
) -> list[Attachment]:
    """The chat's attachments among ``ids`` (only those not sent yet, unless told)."""
    valid = [i for i in ids if is_id(ID_PREFIX, i)]
    if not valid:
        return []
    query = select(Attachment).where(
        Attachment.user_id == user_id, Attachment.chat_id == chat_id, Attachment.id.in_(valid)
    )
    if waiting_only:
        query = query.where(Attachment.message_id.is_(None))
    return list(await s.scalars(query.order_by(Attachment.created_at, Attachment.id)))


async def of_message_seqs(
    s: AsyncSession, *, user_id: str, chat_id: str, seqs: Sequence[int]
) -> list[Attachment]:
    """The attachments of the chat's messages ``seqs``, in that order of messages."""
    if not seqs:
        return []
    query = (
        select(Attachment, Message.seq)
        .join(Message, Message.id == Attachment.message_id)
        .where(Attachment.user_id == user_id, Message.chat_id == chat_id, Message.seq.in_(seqs))
        .order_by(Attachment.created_at, Attachment.id)
    )
    order = {seq: i for i, seq in enumerate(seqs)}
    found = (await s.execute(query)).all()
    return [row for row, _ in sorted(found, key=lambda pair: order[pair[1]])]


def _sent(attachment_id: str) -> AttachmentSent:
    return AttachmentSent(
        f"attachment {attachment_id} was sent with a message already", param="attachment_ids"
    )
