"""The audit log (issue 44): security and admin events recorded with actor, target,
address, user agent and request id, in the transaction of the change they record; the hash
chain that `verify` (and `parley audit verify`) uses to detect a record edited, deleted or
moved; appends from many requests at once that still form one chain; pruning that keeps
the rest verifiable. Admins change users (tier, role, disabled) through the console's
routes, each change on the record; a disabled user's session and key stop at once; the last
admin cannot be removed. Both databases."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, text, update

from parley.accounts.management import Management, UserChange
from parley.audit.actions import Actor, AuditAction, AuditEvent
from parley.audit.chain import GENESIS, Chain
from parley.domain import UserRole, utcnow
from parley.services import Services
from parley.store import audit, users
from parley.store.audit import AuditRecord
from tests.helpers import PASSWORD, assert_error, bearer, user_headers

AGENT = {"User-Agent": "audit-test/1.0"}


async def make(services: Services, email: str, role: UserRole) -> None:
    async with services.db.transaction() as s:
        user = await users.find_user_by_email(s, email)
    assert user is not None
    manage = Management(services.db, services.audit, list(services.settings.qos.tiers))
    await manage.change(Actor.cli(), user.id, UserChange(role=role), "cli")


async def admin_headers(client: httpx.AsyncClient, services: Services) -> dict[str, str]:
    auth = await user_headers(client, "root@example.com")
    await make(services, "root@example.com", UserRole.ADMIN)
    return auth


async def records(
    client: httpx.AsyncClient, admin: dict[str, str], **q: Any
) -> list[dict[str, Any]]:
    r = await client.get("/api/admin/audit", params={"limit": 500, **q}, headers=admin)
    assert r.status_code == 200, r.text
    data: list[dict[str, Any]] = r.json()["data"]
    return data


async def test_account_events_are_recorded_with_who_where_and_which_request(
    client: httpx.AsyncClient, services: Services
) -> None:
    ada = await user_headers(client, "ada@example.com")
    me = (await client.get("/api/me", headers=ada)).json()["user"]["id"]
    wrong = {"email": "ada@example.com", "password": "not-" + PASSWORD}
    r = await client.post("/api/auth/login", json=wrong, headers=AGENT)
    assert r.status_code == 401
    r = await client.post("/api/auth/login", json={**wrong, "password": PASSWORD}, headers=AGENT)
    session = bearer(r.json()["token"])
    key = (await client.post("/api/keys", json={"name": "ci"}, headers=session)).json()
    await client.delete(f"/api/keys/{key['id']}", headers=session)
    r = await client.post(
        "/api/auth/password",
        json={"current_password": PASSWORD, "new_password": PASSWORD + "-2"},
        headers={**session, **AGENT},
    )
    assert r.status_code == 200, r.text
    admin = await admin_headers(client, services)

    about_ada = await records(client, admin, subject=me)
    actions = [r["action"] for r in reversed(about_ada)]
    assert actions == [
        AuditAction.SIGNUP, AuditAction.LOGIN_FAILED, AuditAction.LOGIN, AuditAction.KEY_CREATED,
        AuditAction.KEY_REVOKED, AuditAction.PASSWORD_CHANGED,
    ]  # fmt: skip
    failed = next(r for r in about_ada if r["action"] == AuditAction.LOGIN_FAILED)
    assert failed["actor"] == "ada@example.com" and failed["detail"]["reason"] == "wrong password"
    assert (failed["address"], failed["user_agent"]) == ("127.0.0.1", "audit-test/1.0")
    assert failed["request_id"]
    changed = next(r for r in about_ada if r["action"] == AuditAction.PASSWORD_CHANGED)
    assert changed["actor_id"] == me and changed["detail"]["sessions_ended"] == 1
    role = (await records(client, admin, action=AuditAction.ROLE_CHANGED))[0]
    assert (role["actor"], role["detail"]["to"], role["detail"]["rule"]) == ("cli", "admin", "cli")
    r = await client.get("/api/admin/audit/verify", headers=admin)
    assert r.json() == {"ok": True, "breaks": []}


async def test_an_admin_changes_a_user_and_a_disabled_users_credentials_stop_at_once(
    client: httpx.AsyncClient, services: Services
) -> None:
    admin = await admin_headers(client, services)
    ada = await user_headers(client, "ada@example.com")
    key = bearer((await client.post("/api/keys", json={"name": "k"}, headers=ada)).json()["key"])
    assert (await client.get("/api/me", headers=key)).status_code == 200  # (cached now)
    found = (await client.get("/api/admin/users", params={"q": "ADA@"}, headers=admin)).json()
    (user,) = found["data"]
    r = await client.patch(
        f"/api/admin/users/{user['id']}", json={"tier": "plus", "disabled": True}, headers=admin
    )
    assert r.status_code == 200 and r.json()["tier"] == "plus" and r.json()["disabled"], r.text
    assert_error(await client.get("/api/me", headers=ada), 401, "invalid_token")  # ended
    assert_error(await client.get("/api/me", headers=key), 401, "account_disabled")
    login = await client.post(
        "/api/auth/login", json={"email": "ada@example.com", "password": PASSWORD}
    )
    assert_error(login, 401, "account_disabled")
    r = await client.patch(f"/api/admin/users/{user['id']}", json={"tier": "gold"}, headers=admin)
    assert_error(r, 400)
    changes = await records(client, admin, subject=user["id"])
    assert {c["action"] for c in changes} >= {AuditAction.TIER_CHANGED, AuditAction.USER_DISABLED}
    tier = next(c for c in changes if c["action"] == AuditAction.TIER_CHANGED)
    assert tier["detail"] == {
        "email": "ada@example.com", "from": "free", "to": "plus", "rule": "admin:root@example.com"
    }  # fmt: skip

    root_id = (await client.get("/api/me", headers=admin)).json()["user"]["id"]
    r = await client.patch(f"/api/admin/users/{root_id}", json={"role": "user"}, headers=admin)
    assert_error(r, 409, "last_admin")


async def test_a_chain_rewritten_without_the_key_does_not_verify(services: Services) -> None:
    """Someone who can write the database but lacks ``secret_key`` deletes a record and
    recomputes every hash after it: the chain does not hold."""
    for i in range(4):
        await services.audit.record(
            AuditEvent(AuditAction.ADMIN_READ, Actor.system(), detail={"i": i})
        )
    async with services.db.transaction() as s:
        await s.execute(delete(AuditRecord).where(AuditRecord.seq == 2))
        await s.execute(text("UPDATE audit_records SET seq = seq - 1 WHERE seq > 2"))
        await s.execute(text("UPDATE audit_head SET seq = seq - 1"))
        await _rechain(s, "not the server's secret key")
    breaks = await services.audit.verify()
    assert breaks and breaks[0].seq == 1, breaks


@pytest.mark.parametrize("tamper", ["edit", "delete", "reorder", "delete-last"])
async def test_verify_finds_a_record_edited_deleted_or_moved(
    services: Services, tamper: str
) -> None:
    for i in range(5):
        await services.audit.record(
            AuditEvent(AuditAction.ADMIN_READ, Actor.system(), "user", f"user_{i}", {"i": i})
        )
    assert await services.audit.verify() == []
    async with services.db.transaction() as s:
        if tamper == "edit":
            await s.execute(update(AuditRecord).where(AuditRecord.seq == 3).values(actor="eve"))
        elif tamper == "delete":
            await s.execute(delete(AuditRecord).where(AuditRecord.seq == 3))
        elif tamper == "delete-last":
            await s.execute(delete(AuditRecord).where(AuditRecord.seq == 5))
        else:  # two records' places swapped
            await s.execute(text("UPDATE audit_records SET seq = 100 WHERE seq = 2"))
            await s.execute(text("UPDATE audit_records SET seq = 2 WHERE seq = 3"))
            await s.execute(text("UPDATE audit_records SET seq = 3 WHERE seq = 100"))
    breaks = await services.audit.verify()
    assert breaks, tamper
    where = {"edit": 3, "delete": 3, "reorder": 2, "delete-last": 5}[tamper]
    assert breaks[0].seq == where, breaks


async def test_appends_from_many_requests_at_once_form_one_chain(services: Services) -> None:
    async def one(i: int) -> None:
        await services.audit.record(
            AuditEvent(AuditAction.ADMIN_READ, Actor.system(), "user", f"user_{i}")
        )

    await asyncio.gather(*(one(i) for i in range(40)))
    assert await services.audit.verify() == []
    assert await services.audit.count() == 40


async def test_pruning_keeps_what_remains_verifiable(services: Services) -> None:
    for i in range(6):
        await services.audit.record(
            AuditEvent(AuditAction.ADMIN_READ, Actor.system(), detail={"i": i})
        )
    old = utcnow() - timedelta(days=services.settings.audit.retention_days + 1)
    async with services.db.transaction() as s:  # the first four written long ago
        await s.execute(update(AuditRecord).where(AuditRecord.seq <= 4).values(at=old))
    async with services.db.transaction() as s:  # (re-chained: those dates are what was written)
        await _rechain(s, services.settings.secret_key.get_secret_value())
    assert await services.audit.verify() == []
    assert await services.audit.prune() == 4
    assert await services.audit.verify() == []
    assert await services.audit.count() == 2
    lines = [line async for line in services.audit.export()]
    assert [line.count('"seq": ') for line in lines] == [1, 1]


async def _rechain(s: Any, secret_key: str) -> None:
    """Recompute every hash with the key of ``secret_key``."""
    chain = Chain(secret_key)
    previous = GENESIS
    rows = [row async for row in audit.in_order(s)]
    for row in rows:
        row.prev_hash = previous
        row.hash = previous = chain.link(previous, audit.entry_of(row))
    await s.execute(text("UPDATE audit_head SET hash = :h"), {"h": previous})
