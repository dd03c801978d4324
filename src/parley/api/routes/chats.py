"""Chats and their history. Listing chats, reading one and paging its history tolerate a
little lag: they read from a replica when one is configured, unless the user has just
written (``store/routing.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from parley import text
from parley.api.deps import CursorQuery, LimitDep, PrincipalDep, ServicesDep
from parley.api.instructions import screened
from parley.api.routes import AUTHED, BODY, errors
from parley.api.routes.attachments import attachments_of, with_files
from parley.api.routes.feedback import with_feedback
from parley.api.schemas import (
    ChatCreate,
    ChatDetail,
    ChatList,
    ChatOut,
    ChatUpdate,
    Deleted,
    MessageError,
    MessageList,
    MessageOut,
)
from parley.domain import MessageRole, MessageStatus
from parley.errors import ValidationFailed
from parley.services import Services
from parley.store import branches, chats, run_records
from parley.store.chats import Order
from parley.store.pages import Page
from parley.store.parts import MessageParts
from parley.store.schema import Chat, Message

router = APIRouter(prefix="/api/chats", tags=["chats"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ChatOut,
    responses=errors(*AUTHED, *BODY),
)
async def create_chat(body: ChatCreate, who: PrincipalDep, svc: ServicesDep) -> ChatOut:
    if body.title is not None and body.title_from is not None:
        raise ValidationFailed(
            "give a title or title_from, not both", code="invalid_title", param="title_from"
        )
    limit = svc.settings.runs.max_title_chars
    if body.title_from is not None:
        title = text.title_from(body.title_from, limit)
    else:
        title = _title(body.title, limit, allow_empty=True) or text.DEFAULT_TITLE
    async with svc.db.transaction() as s:
        chat = await chats.create_chat(s, user_id=who.user_id, title=title)
    return ChatOut.model_validate(chat, from_attributes=True)


@router.get("", response_model=ChatList, responses=errors(400, *AUTHED, 422))
async def list_chats(
    who: PrincipalDep,
    svc: ServicesDep,
    limit: LimitDep,
    cursor: CursorQuery = None,
    shelved: Annotated[bool, Query(description="The chats the user archived instead")] = False,
    pinned: Annotated[bool, Query(description="Only the pinned chats")] = False,
) -> ChatList:
    """The user's chats, most recent activity first, paged by cursor."""
    shelf = chats.Shelf(shelved=shelved, pinned=pinned)
    async with svc.reads.session(who.user_id) as s:
        page = await chats.list_chats(
            s, user_id=who.user_id, limit=limit, cursor=cursor, cursors=svc.cursors, shelf=shelf
        )
    return ChatList(
        data=[ChatOut.model_validate(c, from_attributes=True) for c in page.items],
        next_cursor=page.next_cursor,
    )


@router.get("/{chat_id}", response_model=ChatDetail, responses=errors(*AUTHED, 404))
async def get_chat(chat_id: str, who: PrincipalDep, svc: ServicesDep) -> ChatDetail:
    async with svc.reads.session(who.user_id) as s:
        chat = await chats.get_chat(s, user_id=who.user_id, chat_id=chat_id)
    return ChatDetail.model_validate(chat, from_attributes=True)


@router.patch("/{chat_id}", response_model=ChatOut, responses=errors(*AUTHED, 404, *BODY))
async def change_chat(
    chat_id: str, body: ChatUpdate, who: PrincipalDep, svc: ServicesDep
) -> ChatOut:
    """Rename, pin, archive (``shelved``) or instruct the chat."""
    title, limit = body.title, svc.settings.runs.max_title_chars
    if title is not None and body.title_from is not None:
        raise ValidationFailed(
            "give a title or title_from, not both", code="invalid_title", param="title_from"
        )
    if title is not None:
        title = _title(title, limit, allow_empty=False)
    elif body.title_from is not None:
        title = text.title_from(body.title_from, limit)
    instructions = await screened(svc, who, body.instructions)
    change = chats.ChatChange(title, body.pinned, body.shelved, instructions)
    if change == chats.ChatChange():
        raise ValidationFailed("nothing to change", code="empty_change", param="title")
    async with svc.db.transaction() as s:
        chat = await chats.change_chat(s, user_id=who.user_id, chat_id=chat_id, change=change)
    return ChatOut.model_validate(chat, from_attributes=True)


@router.delete("/{chat_id}", response_model=Deleted, responses=errors(*AUTHED, 404))
async def delete_chat(chat_id: str, who: PrincipalDep, svc: ServicesDep) -> Deleted:
    """Delete the chat with its messages and runs (archived ones too)."""
    async with svc.db.transaction() as s:
        key = await chats.delete_chat(s, user_id=who.user_id, chat_id=chat_id)
    if key is not None:
        await svc.archiver.forget(key)
    await attachments_of(svc).forget_chat(who.user_id, chat_id)  # its files' objects
    return Deleted(id=chat_id, object="chat.deleted")


@router.get(
    "/{chat_id}/messages",
    response_model=MessageList,
    responses=errors(400, *AUTHED, 404, 422, 503),
)
async def list_messages(
    chat_id: str,
    who: PrincipalDep,
    svc: ServicesDep,
    limit: LimitDep,
    cursor: CursorQuery = None,
    order: Annotated[
        Order, Query(description="desc: newest first (default); asc: oldest first.")
    ] = "desc",
) -> MessageList:
    async with svc.reads.session(who.user_id) as s:
        chat = await chats.get_chat(s, user_id=who.user_id, chat_id=chat_id)
        if chat.archived_at is None:
            tree = await branches.chat_tree(s, chat)
            page = await chats.list_messages(
                s,
                user_id=who.user_id,
                chat_id=chat_id,
                limit=limit,
                cursor=cursor,
                order=order,
                cursors=svc.cursors,
                shown=tree.path_ids,
            )
            failed = [m.run_id for m in page.items if m.run_id and m.status in _ENDED_BADLY]
            errors = await run_records.errors_of(s, user_id=who.user_id, run_ids=failed)
            done = [m.run_id for m in page.items if m.run_id and m.status in _MAYBE_CUT]
            cut = await run_records.cut_at_limit(s, user_id=who.user_id, run_ids=done)
    if chat.archived_at is not None:
        page, errors, tree, cut = await _archived_page(svc, chat, limit, cursor, order)
    data = [_message(m, errors, tree, cut) for m in page.items]
    await with_files(svc, who.user_id, data)  # (api/routes/attachments.py)
    await with_feedback(svc, who.user_id, data)  # (api/routes/feedback.py)
    return MessageList(data=data, next_cursor=page.next_cursor)


async def _archived_page(
    svc: Services, chat: Chat, limit: int, cursor: str | None, order: Order
) -> tuple[Page[Message], dict[str, tuple[str, str]], branches.Tree, set[str]]:
    """A page of an archived chat's history, read from its archive; its runs' errors."""
    archived = await svc.archiver.read(chat)
    nodes = [branches.Node(m.id, m.parent_id, m.seq) for m in archived.messages]
    tree = branches.build_tree(nodes, chat.active_leaf_id)
    page = chats.page_archived(
        archived.messages,
        shown=tree.path_ids,
        chat_id=chat.id,
        limit=limit,
        cursor=cursor,
        order=order,
        cursors=svc.cursors,
    )
    errors = {r.id: (r.error_code, r.error_message or "") for r in archived.runs if r.error_code}
    cut = {r.id for r in archived.runs if r.finish_reason == "length"}
    return page, errors, tree, cut


_ENDED_BADLY = frozenset({MessageStatus.FAILED, MessageStatus.REJECTED})
_MAYBE_CUT = frozenset({MessageStatus.COMPLETED})


def _message(
    m: Message, errors: dict[str, tuple[str, str]], tree: branches.Tree, cut: set[str]
) -> MessageOut:
    out = MessageOut.model_validate(m, from_attributes=True)
    out.cut = m.role is MessageRole.ASSISTANT and (m.run_id or "") in cut
    parts = MessageParts.from_json(m.parts)
    out.reasoning, out.tool_call_id = parts.reasoning, parts.tool_call_id
    out.tool_calls = [c.wire() for c in parts.tool_calls] or None
    out.tool_steps = [s.wire() for s in parts.steps] or None
    if m.id in tree.nodes:
        out.sibling_ids = [n.id for n in tree.siblings(m.id)]
        out.sibling_index = out.sibling_ids.index(m.id) + 1
    said = errors.get(m.run_id or "") if m.role is MessageRole.ASSISTANT else None
    if said is not None:
        out.error = MessageError(code=said[0], message=said[1])
    return out


def _title(raw: str | None, limit: int, *, allow_empty: bool) -> str:
    title = " ".join((raw or "").split())
    text.check_title(title)
    if not title and not allow_empty:
        raise ValidationFailed("title must not be blank", code="invalid_title", param="title")
    if len(title) > limit:
        raise ValidationFailed(
            f"title must be at most {limit} characters",
            code="title_too_long",
            param="title",
        )
    return title
