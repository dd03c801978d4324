"""Files of a chat: attached to its next message (upload: the raw file as the body,
checked by its content; list; remove before sending; ``POST /api/chats/{id}/messages``
sends them with ``attachment_ids``) and made by an answer's tools (``run_python``'s
writes); the messages list shows each message's files, and ``content`` downloads one."""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response, status

from parley.api.deps import PrincipalDep, ServicesDep
from parley.api.routes import AUTHED, errors
from parley.api.schemas import AttachmentList, AttachmentOut, Deleted, MessageOut
from parley.api.uploads import while_connected
from parley.attachments.service import Attachments
from parley.blobs.interface import BlobNotFound
from parley.services import Services
from parley.store import attachments
from parley.store.schema import Attachment

router = APIRouter(prefix="/api", tags=["attachments"])

# the upload's path, for the body limit (api/limits.py): its own, the largest file's size
UPLOAD_PATH = re.compile(r"/api/chats/[^/]+/attachments")


def attachments_of(svc: Services) -> Attachments:
    return Attachments(svc.db, svc.archiver.blobs, svc.settings.attachments, svc.parsing)


def upload_limit(svc: Services) -> tuple[re.Pattern[str], int]:
    return UPLOAD_PATH, svc.settings.attachments.max_bytes


@router.post(
    "/chats/{chat_id}/attachments",
    status_code=status.HTTP_201_CREATED,
    response_model=AttachmentOut,
    responses=errors(400, *AUTHED, 404, 409, 413, 415, 422, 429, 503),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        }
    },
)
async def upload(
    chat_id: str,
    request: Request,
    who: PrincipalDep,
    svc: ServicesDep,
    filename: Annotated[str, Query(max_length=255)] = "file",
) -> AttachmentOut:
    """Attach a file to the chat's next message: the file itself is the request body, its
    name in ``filename``. Text (UTF-8), Markdown, source code and PDF, told by content:
    415 ``unsupported_file_type`` for anything else (whatever its name), 415
    ``encrypted_pdf``, 400 ``empty_file`` / ``pdf_without_text`` / ``unreadable_pdf``, 413
    over ``attachments.max_bytes``, ``max_chars`` or ``max_pdf_pages`` (``too_many_pages``),
    422 ``file_too_costly`` past the parsing limits (``[parsing]``: CPU time, memory, time),
    429 ``too_many_parses`` while ``parsing.per_user`` of the user's files are being read,
    409 ``too_many_files``. A refused file leaves nothing stored. The body is read only once
    the caller and the chat are known. Send it with ``attachment_ids`` on the next message."""
    files = attachments_of(svc)
    await files.admit(who.user_id, chat_id)  # another user's chat: 404 before any byte
    data = await request.body()
    made = await while_connected(request, files.upload(who.user_id, chat_id, filename, data))
    return _out(made)


@router.get(
    "/chats/{chat_id}/attachments",
    response_model=AttachmentList,
    responses=errors(*AUTHED, 404),
)
async def list_attachments(chat_id: str, who: PrincipalDep, svc: ServicesDep) -> AttachmentList:
    """The chat's files, oldest first: those sent (``message_id``) and those waiting."""
    found = await attachments_of(svc).list(who.user_id, chat_id)
    return AttachmentList(data=[_out(a) for a in found])


@router.delete(
    "/attachments/{attachment_id}",
    response_model=Deleted,
    responses=errors(*AUTHED, 404, 409),
)
async def remove(attachment_id: str, who: PrincipalDep, svc: ServicesDep) -> Deleted:
    """Take a file off the message before it is sent (409 ``attachment_sent`` after)."""
    await attachments_of(svc).remove(who.user_id, attachment_id)
    return Deleted(id=attachment_id, object="attachment.deleted")


# served as what they are; anything else as bytes to save (never rendered by the browser)
SHOWN_TYPES = frozenset(
    {"text/plain", "text/csv", "text/markdown", "application/json", "application/pdf",
     "image/png", "image/jpeg", "image/gif", "image/webp"}
)  # fmt: skip


@router.get(
    "/attachments/{attachment_id}/content",
    response_class=Response,
    responses={
        **errors(*AUTHED, 404, 503),
        200: {
            "content": {
                kind: {"schema": {"type": "string"}}
                for kind in sorted({*SHOWN_TYPES, "application/octet-stream"})
            }
        },
    },
)
async def download(attachment_id: str, who: PrincipalDep, svc: ServicesDep) -> Response:
    """A file's bytes, as a download (``Content-Disposition: attachment``): one the user
    sent, or one an answer's tool made. Another user's file is 404. Only plain kinds are
    served as what they are (``SHOWN_TYPES``; with ``nosniff`` and a sandboxing CSP, as
    every answer is): anything else, HTML among them, as ``application/octet-stream``."""
    async with svc.db.transaction() as s:
        found = await attachments.get(s, user_id=who.user_id, attachment_id=attachment_id)
    try:
        data = await svc.archiver.blobs.get(found.blob_key)
    except BlobNotFound:  # its object is gone (a chat deleted meanwhile)
        raise attachments.not_found(attachment_id) from None
    media_type = found.media_type if found.media_type in SHOWN_TYPES else "application/octet-stream"
    return Response(
        data,
        media_type=media_type,
        headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(found.name, safe='')}",
            "Content-Security-Policy": "sandbox; default-src 'none'",
            "Cache-Control": "private, no-store",
        },
    )


async def with_files(svc: Services, user_id: str, messages: list[MessageOut]) -> None:
    """Each message's files on it (for the messages list)."""
    async with svc.db.transaction() as s:
        found = await attachments.of_messages(
            s, user_id=user_id, message_ids=[m.id for m in messages]
        )
    for message in messages:
        message.attachments = [_out(a) for a in found.get(message.id, [])]


def _out(a: Attachment) -> AttachmentOut:
    return AttachmentOut.model_validate(a, from_attributes=True)
