"""A user's data: export every chat (a background job, a short-lived link), import chats
(parley's own export, ChatGPT's), delete the account with everything it holds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from parley.api.deps import ClientAddressDep, PrincipalDep, ServicesDep, SessionPrincipalDep
from parley.api.portability_schemas import AccountDelete, ExportList, ExportOut, ImportOut
from parley.api.routes import AUTHED, BODY, errors
from parley.api.routes.auth import clear_cookies
from parley.api.schemas import Deleted
from parley.api.uploads import spooled, spooled_aside, while_connected
from parley.audit.actions import Actor, AuditAction, AuditEvent
from parley.blobs.settings import PortabilitySettings
from parley.domain import ExportStatus
from parley.portability.parts import ImportSummary, import_parts, write_import_parts
from parley.portability.reader import ImportLimits
from parley.services import Services
from parley.store.schema import Export

router = APIRouter(prefix="/api", tags=["your data"])

IMPORTS_PATH = "/api/imports"


@router.post(
    "/exports",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ExportOut,
    responses=errors(*AUTHED),
)
async def start_export(who: PrincipalDep, svc: ServicesDep) -> ExportOut:
    """Start an export of all the user's chats; poll it until ``status`` is ``ready``."""
    return _export_out(await svc.exports.start(who.user_id), svc)


@router.get("/exports", response_model=ExportList, responses=errors(*AUTHED))
async def list_exports(who: PrincipalDep, svc: ServicesDep) -> ExportList:
    """The user's latest exports, newest first."""
    return ExportList(data=[_export_out(e, svc) for e in await svc.exports.list(who.user_id)])


@router.get("/exports/{export_id}", response_model=ExportOut, responses=errors(*AUTHED, 404))
async def get_export(export_id: str, who: PrincipalDep, svc: ServicesDep) -> ExportOut:
    return _export_out(await svc.exports.get(who.user_id, export_id), svc)


@router.get(
    "/exports/{export_id}/download",
    responses={200: {"content": {"application/zip": {}}}, **errors(404, 409)},
)
async def download_export(
    export_id: str, svc: ServicesDep, token: Annotated[str, Query(max_length=200)] = ""
) -> Response:
    """The export's zip, by the link ``GET /api/exports/{id}`` hands out (no session)."""
    export, data = await svc.exports.download(export_id, token)
    detail = {"bytes": len(data)}
    owner = Actor(export.user_id, "by its signed link")
    await svc.audit.record(
        AuditEvent(AuditAction.EXPORT_DOWNLOADED, owner, "export", export.id, detail)
    )
    day = export.created_at.astimezone(UTC).strftime("%Y-%m-%d")
    name = f"parley-export-{day}.zip"
    return Response(
        data,
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.post(
    "/imports",
    status_code=status.HTTP_201_CREATED,
    response_model=ImportOut,
    responses=errors(*AUTHED, *BODY, 429, 503),
)
async def import_file(
    request: Request,
    who: PrincipalDep,
    svc: ServicesDep,
    filename: Annotated[str, Query(max_length=255)] = "upload",
) -> ImportOut:
    """Import chats from a file sent as the request body: parley's export (its zip or its
    ``parley-export.json``), or ChatGPT's (its zip, ``conversations.json`` or one of the
    ``conversations-NNN.json`` files a newer export is split into: send each). Read by
    content, not by name. A chat imported before (the same file again, or the user's own
    chat from their export) is skipped: ``skipped`` and ``skipped_chat_ids`` (the chats that
    hold them) say which. The file is read whole before anything is written (a file with
    anything wrong adds nothing); its chats are then written in parts, so an import cut
    short (the server stopped) is completed by sending the file again.

    Limits (``[portability]``): the body ``max_import_bytes`` (413), a zip's members
    ``max_import_unpacked_bytes`` uncompressed, ``max_import_chats``, ``max_import_messages``
    and ``max_import_message_chars`` a message (422 ``import_too_large``); reading it runs
    in the parsing pool (``[parsing]``: 422 ``file_too_costly`` past its CPU, memory or time
    limit, 429 ``too_many_parses``). The body is read only once the caller is known."""
    limits = import_limits(svc.settings.portability)
    async with spooled(request) as path, spooled_aside(path + ".chats") as chats:
        job = svc.parsing.run(who.user_id, write_import_parts, path, filename, limits, chats)
        summary = ImportSummary.model_validate(await while_connected(request, job))
        result = await import_parts(svc.db, who.user_id, summary, chats)
    return ImportOut(
        source=summary.source,
        chats=result.chats,
        messages=result.messages,
        chat_ids=list(result.chat_ids),
        skipped=len(result.skipped_chat_ids),
        skipped_chat_ids=list(result.skipped_chat_ids),
    )


def import_limits(settings: PortabilitySettings) -> ImportLimits:
    return ImportLimits(
        max_chats=settings.max_import_chats,
        max_messages=settings.max_import_messages,
        max_unpacked_bytes=settings.max_import_unpacked_bytes,
        max_message_chars=settings.max_import_message_chars,
    )


@router.delete("/me", response_model=Deleted, responses=errors(*AUTHED, *BODY, 429))
async def delete_account(
    body: AccountDelete,
    who: SessionPrincipalDep,
    svc: ServicesDep,
    client: ClientAddressDep,
    response: Response,
) -> Deleted:
    """Delete the account and everything it holds: chats, messages, runs, keys, sessions,
    archived chats and exports in the blob store. Needs the password (422 ``wrong_password``)."""
    await svc.accounts.confirm_password(who, body.password, client, param="password")
    await delete_user_data(svc, who.user_id)
    clear_cookies(response)
    return Deleted(id=who.user_id, object="user.deleted")


async def delete_user_data(svc: Services, user_id: str) -> None:
    """The user's objects first, then their rows: a failure between leaves an account the
    user can delete again, never objects no account owns."""
    await svc.archiver.delete_user_objects(user_id)
    await svc.accounts.delete_user(user_id)


def _export_out(export: Export, svc: Services) -> ExportOut:
    out = ExportOut.model_validate(export, from_attributes=True)
    if export.status is ExportStatus.READY:
        token, expires = svc.exports.link_token(export.id)
        out.download_url = f"/api/exports/{export.id}/download?token={token}"
        out.download_url_expires_at = datetime.fromtimestamp(expires, UTC)
    return out
