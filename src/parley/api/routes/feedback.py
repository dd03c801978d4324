"""Feedback on answers: thumbs up or down with an optional note, one per answer; shown with
the message, in exports, and counted by model (``parley_feedback``)."""

from __future__ import annotations

from fastapi import APIRouter

from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.routes import AUTHED, BODY, errors
from parley.api.schemas import Deleted, FeedbackIn, FeedbackOut, MessageOut
from parley.domain import MessageRole
from parley.errors import NotFound, ValidationFailed, no_such
from parley.services import Services
from parley.store import chats, feedback
from parley.store.schema import Feedback, Message

router = APIRouter(prefix="/api/chats", tags=["chats"])
PATH = "/{chat_id}/messages/{message_id}/feedback"


@router.put(PATH, response_model=FeedbackOut, responses=errors(*AUTHED, 404, *BODY))
async def rate_answer(
    chat_id: str, message_id: str, body: FeedbackIn, who: PrincipalDep, svc: ServicesDep
) -> FeedbackOut:
    """Rate an answer (again: the new rating replaces the old)."""
    message = await _message(svc, who.user_id, chat_id, message_id)
    if message.role is not MessageRole.ASSISTANT:
        raise ValidationFailed(
            "only an answer can be rated", code="not_an_answer", param="message_id"
        )
    async with svc.db.transaction() as s:
        given = await feedback.rate(s, message, feedback.stored(body.rating), body.note or None)
    svc.metrics.feedback_given(given.model, body.rating)
    return feedback_out(given)


@router.delete(PATH, response_model=Deleted, responses=errors(*AUTHED, 404))
async def clear_rating(
    chat_id: str, message_id: str, who: PrincipalDep, svc: ServicesDep
) -> Deleted:
    await _message(svc, who.user_id, chat_id, message_id)
    async with svc.db.transaction() as s:
        await feedback.clear(s, user_id=who.user_id, message_id=message_id)
    return Deleted(id=message_id, object="feedback")


async def _message(svc: Services, user_id: str, chat_id: str, message_id: str) -> Message:
    """The user's message, from the database or, in a chat archived for being idle, from
    its archive (read outside any transaction). NotFound for another user's."""
    async with svc.db.transaction() as s:
        try:
            return await chats.get_message(
                s, user_id=user_id, chat_id=chat_id, message_id=message_id
            )
        except NotFound:
            chat = await chats.get_chat(s, user_id=user_id, chat_id=chat_id)
            if chat.archived_at is None:
                raise
    archived = await svc.archiver.read(chat)
    for message in archived.messages:
        if message.id == message_id:
            return message
    raise no_such("message", message_id, code="message_not_found", param="message_id")


def feedback_out(given: Feedback) -> FeedbackOut:
    return FeedbackOut(
        rating=feedback.said(given.rating), note=given.note, updated_at=given.updated_at
    )


async def with_feedback(svc: Services, user_id: str, messages: list[MessageOut]) -> None:
    """Each answer's rating on it (for the messages list)."""
    answers = [m.id for m in messages if m.role is MessageRole.ASSISTANT]
    if not answers:
        return
    async with svc.db.transaction() as s:
        found = await feedback.of_messages(s, user_id=user_id, message_ids=answers)
    for message in messages:
        if message.id in found:
            message.feedback = feedback_out(found[message.id])
