"""The admin console's routes (``/api/admin``): users (find, change tier, role or state,
end their sessions, revoke their keys) and the audit log (read, export, verify). Reading
needs an auditor's or an admin's login session, changing an admin's (403 ``admin_only``
otherwise; an API key is refused with 403 ``session_required``). Every change is on the
audit log with who made it."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from dataclasses import asdict
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from parley.accounts.management import Management, UserChange
from parley.accounts.principal import Principal
from parley.api.deps import AdminDep, AuditorDep, ServicesDep
from parley.api.routes import AUTHED, BODY, errors
from parley.audit.actions import Actor, AuditAction, AuditEvent
from parley.audit.log import wire
from parley.domain import CONTENT_BLOCKED, MODERATION_UNAVAILABLE, UserRole
from parley.errors import InvalidRequest
from parley.json_types import Flag
from parley.services import Services
from parley.store import audit, refusals, usage
from parley.store.schema import User
from parley.store.users import normalize_email

router = APIRouter(prefix="/api/admin", tags=["admin"])

ADMIN = (*AUTHED, 403)


class AdminUserOut(BaseModel):
    id: str
    object: Literal["user"] = "user"
    email: str
    tier: str
    role: UserRole
    disabled: bool
    created_at: datetime


class AdminUserList(BaseModel):
    object: Literal["list"] = "list"
    data: list[AdminUserOut]
    next_after: str | None = Field(description="Pass as `after` for the next page.")


class UserUpdate(BaseModel):
    model_config = {"extra": "forbid"}

    tier: str | None = Field(None, max_length=40)
    role: UserRole | None = None
    disabled: Flag | None = Field(None, description="true: sign-in refused, sessions ended.")


class Counted(BaseModel):
    count: int


class AuditRecordOut(BaseModel):
    seq: int
    at: datetime
    action: str
    actor_id: str | None
    actor: str
    target_type: str | None
    target_id: str | None
    detail: dict[str, Any]
    address: str | None
    user_agent: str | None
    request_id: str | None
    prev_hash: str
    hash: str


class AuditPage(BaseModel):
    object: Literal["list"] = "list"
    data: list[AuditRecordOut]
    next_before: int | None = Field(description="Pass as `before` for older records.")


class BreakOut(BaseModel):
    seq: int
    why: str


class AuditVerified(BaseModel):
    ok: bool
    breaks: list[BreakOut]


def management(svc: Services) -> Management:
    tiers = list(svc.settings.qos.tiers)
    return Management(svc.db, svc.audit, tiers, svc.accounts.forget_credentials)


def actor(who: Principal) -> Actor:
    return Actor(who.user_id, who.email)


class TierList(BaseModel):
    tiers: dict[str, dict[str, Any]] = Field(description="Each tier's settings, by name.")


@router.get("/tiers", response_model=TierList, responses=errors(*ADMIN))
async def list_tiers(who: AuditorDep, svc: ServicesDep) -> TierList:
    """The tiers a user can be moved to, with their limits."""
    tiers = svc.settings.qos.tiers
    return TierList(tiers={name: t.model_dump(mode="json") for name, t in tiers.items()})


@router.get("/users", response_model=AdminUserList, responses=errors(*ADMIN, 422))
async def list_users(
    who: AuditorDep,
    svc: ServicesDep,
    q: Annotated[str | None, Query(max_length=320)] = None,
    after: Annotated[str | None, Query(max_length=320)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> AdminUserList:
    """Users by email, those whose email holds `q`; the next page `after` the last email."""
    found = await management(svc).find(q, limit, after)
    nxt = found[-1].email if len(found) == limit else None
    return AdminUserList(data=[_user_out(u) for u in found], next_after=nxt)


@router.get("/users/{user_id}", response_model=AdminUserOut, responses=errors(*ADMIN, 404))
async def get_user(user_id: str, who: AuditorDep, svc: ServicesDep) -> AdminUserOut:
    return _user_out(await management(svc).get(user_id))


@router.patch(
    "/users/{user_id}", response_model=AdminUserOut, responses=errors(*ADMIN, 404, 409, *BODY)
)
async def update_user(
    user_id: str, body: UserUpdate, who: AdminDep, svc: ServicesDep
) -> AdminUserOut:
    """Change a user's tier, role or state (each change on the audit log). Disabling ends
    their sessions and refuses their keys; the last admin cannot be demoted or disabled
    (409 `last_admin`); an unknown tier is 400."""
    change = UserChange(body.tier, body.role, body.disabled)
    user = await management(svc).change(actor(who), user_id, change, f"admin:{who.email}")
    return _user_out(user)


@router.post("/users/{user_id}/sessions/end", response_model=Counted, responses=errors(*ADMIN, 404))
async def end_sessions(user_id: str, who: AdminDep, svc: ServicesDep) -> Counted:
    """End every session of the user."""
    return Counted(count=await management(svc).end_sessions(actor(who), user_id))


@router.post("/users/{user_id}/keys/revoke", response_model=Counted, responses=errors(*ADMIN, 404))
async def revoke_keys(user_id: str, who: AdminDep, svc: ServicesDep) -> Counted:
    """Revoke every API key of the user."""
    return Counted(count=await management(svc).revoke_keys(actor(who), user_id))


@router.get("/audit", response_model=AuditPage, responses=errors(*ADMIN, 422))
async def audit_log(
    who: AuditorDep,
    svc: ServicesDep,
    before: Annotated[int | None, Query(ge=1)] = None,
    action: Annotated[AuditAction | None, Query()] = None,
    subject: Annotated[str | None, Query(max_length=80, description="A user's id.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> AuditPage:
    """The audit log, newest first: of an `action`, by or about a user (`subject`)."""
    async with svc.db.transaction() as s:
        rows = await audit.page(
            s, before=before, limit=limit, action=action and action.value, subject=subject
        )
    data = [AuditRecordOut.model_validate(wire(r)) for r in rows]
    return AuditPage(data=data, next_before=rows[-1].seq if len(rows) == limit else None)


@router.get(
    "/audit/export",
    response_class=StreamingResponse,
    responses={
        **errors(*ADMIN),
        200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}},
    },
)
async def export_audit(who: AuditorDep, svc: ServicesDep) -> StreamingResponse:
    """The whole audit log, oldest first, as JSON lines."""
    lines: AsyncIterator[str] = svc.audit.export()
    return StreamingResponse(
        lines,
        media_type="application/x-ndjson",
        headers={"Content-Disposition": 'attachment; filename="parley-audit.jsonl"'},
    )


@router.get("/audit/verify", response_model=AuditVerified, responses=errors(*ADMIN))
async def verify_audit(who: AuditorDep, svc: ServicesDep) -> AuditVerified:
    """Whether the chain holds: every record as written, none missing or moved."""
    breaks = await svc.audit.verify()
    return AuditVerified(ok=not breaks, breaks=[BreakOut(seq=b.seq, why=b.why) for b in breaks])


class UsageOut(BaseModel):
    day: str = Field(description="The UTC day the runs ended (YYYY-MM-DD).")
    user_id: str
    email: str
    model: str
    api_key_id: str | None = Field(description="The key the runs were asked with; null: a session.")
    source: str = Field(description="chat, api (a program's) or summary (the service's own).")
    runs: int
    prompt_tokens: int
    completion_tokens: int


class UsageReport(BaseModel):
    object: Literal["usage"] = "usage"
    since: date
    until: date
    data: list[UsageOut]
    prompt_tokens: int = Field(description="All of `data`'s.")
    completion_tokens: int = Field(description="All of `data`'s.")


@router.get(
    "/usage",
    response_model=UsageReport,
    responses={
        **errors(*ADMIN, 400, 422),
        200: {"content": {"application/json": {}, "text/csv": {"schema": {"type": "string"}}}},
    },
)
async def usage_report(
    who: AuditorDep,
    svc: ServicesDep,
    since: Annotated[date, Query(description="The first day (UTC), included.")],
    until: Annotated[date, Query(description="The last day (UTC), included.")],
    format: Annotated[Literal["json", "csv"], Query()] = "json",
) -> Any:
    """Tokens and runs per day, user, model, API key and source, of the runs that ended
    those days (their totals are what the token counters of `/metrics` added for them); as
    JSON, or CSV with `format=csv`. At most 366 days."""
    if until < since or (until - since).days > 365:
        raise InvalidRequest("until must be on or after since, at most 366 days on", param="until")
    start = datetime.combine(since, time.min, tzinfo=UTC)
    end = datetime.combine(until + timedelta(days=1), time.min, tzinfo=UTC)
    async with svc.db.transaction() as s:
        rows = await usage.usage(s, since=start, until=end)
        read = {"what": "usage", "since": since.isoformat(), "until": until.isoformat()}
        await svc.audit.record_in(s, AuditEvent(AuditAction.ADMIN_READ, actor(who), detail=read))
    data = [UsageOut(**asdict(r)) for r in rows]
    if format == "csv":
        return _csv(data, f"parley-usage-{since}-{until}.csv")
    return UsageReport(
        since=since,
        until=until,
        data=data,
        prompt_tokens=sum(r.prompt_tokens for r in data),
        completion_tokens=sum(r.completion_tokens for r in data),
    )


class RefusedOut(BaseModel):
    run_id: str
    finished_at: datetime | None
    user_id: str
    email: str
    tier: str
    chat_id: str | None
    stage: str = Field(description="input: refused before it ran; output: stopped as it streamed.")
    code: str | None
    message: str | None


class RefusedList(BaseModel):
    object: Literal["list"] = "list"
    data: list[RefusedOut]


@router.get("/refused", response_model=RefusedList, responses=errors(*ADMIN, 422))
async def refused(
    who: AuditorDep,
    svc: ServicesDep,
    email: Annotated[str | None, Query(max_length=320)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> RefusedList:
    """Runs the content policy refused (or could not judge), newest first, of one user's
    email if given — what `parley runs refused` lists (each read on the audit log)."""
    async with svc.db.transaction() as s:
        rows = await refusals.refused_runs(
            s,
            codes=(CONTENT_BLOCKED, MODERATION_UNAVAILABLE),
            email=normalize_email(email) if email else None,
            limit=limit,
        )
        read = {"what": "refused runs", "email": email}
        await svc.audit.record_in(s, AuditEvent(AuditAction.ADMIN_READ, actor(who), detail=read))
    return RefusedList(data=[_refused_out(r) for r in rows])


def _refused_out(row: refusals.RefusedRun) -> RefusedOut:
    run = row.run
    return RefusedOut(
        run_id=run.id,
        finished_at=run.finished_at,
        user_id=run.user_id,
        email=row.email,
        tier=run.tier,
        chat_id=run.chat_id,
        stage=row.stage,
        code=run.error_code,
        message=run.error_message,
    )


def _csv(rows: list[UsageOut], name: str) -> Response:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(list(UsageOut.model_fields))
    for row in rows:
        writer.writerow(["" if v is None else v for v in row.model_dump().values()])
    return Response(
        out.getvalue(),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def _user_out(user: User) -> AdminUserOut:
    return AdminUserOut(
        id=user.id,
        email=user.email,
        tier=user.tier,
        role=UserRole(user.role),
        disabled=user.disabled_at is not None,
        created_at=user.created_at,
    )
