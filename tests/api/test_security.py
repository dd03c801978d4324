"""Ownership (404 for others' objects), credentials (401), CSRF, login throttling."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from parley.accounts.management import Management, UserChange
from parley.audit.actions import Actor
from parley.domain import UserRole, utcnow
from parley.services import Services
from parley.store import users
from parley.store.schema import Session
from tests.helpers import PASSWORD, assert_error, bearer, signup, user_headers

# an export's download is authorized by its signed link, not a credential; a shared link
# is public by design (its token is the capability)
PUBLIC = {
    "/healthz",
    "/readyz",
    "/api/auth/signup",
    "/api/auth/login",
    "/api/exports/{export_id}/download",
    "/api/shared/{token}",
    # signing in with an identity provider: before there is a credential
    "/api/auth/providers",
    "/api/auth/challenge",
    "/api/auth/oidc/{provider}/start",
    "/api/auth/oidc/{provider}/callback",
    # a way back into an account: before there is a credential
    "/api/auth/password-reset",
    "/api/auth/password-reset/confirm",
    "/api/auth/confirm",
    "/api/auth/confirm/resend",
}
BODIES = {
    ("PATCH", "/api/chats/{chat_id}"): {"title": "mine now"},
    ("POST", "/api/chats/{chat_id}/messages"): {"content": "mine now"},
    ("POST", "/api/chats"): {"title": "x"},
    ("POST", "/api/keys"): {"name": "x"},
    ("POST", "/api/chats/{chat_id}/messages/{message_id}/regenerate"): {},
    ("POST", "/api/chats/{chat_id}/messages/{message_id}/continue"): {},
    ("POST", "/api/temporary/messages"): {"messages": [{"role": "user", "content": "hi"}]},
    ("PUT", "/api/chats/{chat_id}/branch"): {"message_id": "msg_000000000000000000000000"},
    ("POST", "/api/runs/{run_id}/tool-calls/{call_id}"): {"approve": True},
    ("PUT", "/api/chats/{chat_id}/messages/{message_id}/feedback"): {"rating": "down"},
}


ADMIN_PREFIX = "/api/admin/"
ADMIN_BODIES = {("PATCH", "/api/admin/users/{user_id}"): {"role": "admin"}}
ADMIN_QUERIES = {("GET", "/api/admin/usage"): {"since": "2026-01-01", "until": "2026-01-02"}}


async def test_every_admin_route_is_403_for_a_user_and_changing_ones_for_an_auditor(
    client: httpx.AsyncClient, services: Services
) -> None:
    """From the OpenAPI document, so a new admin route cannot slip through: a user's
    session and key are refused every one, an auditor every one that changes anything,
    and nothing changed."""
    owner = await user_headers(client, "owner@example.com")
    ids = await _owned_objects(client, owner)
    app = client._transport.app  # type: ignore[attr-defined]
    admin_routes = [(m, p) for m, p in _operations(app) if p.startswith(ADMIN_PREFIX)]
    assert len(admin_routes) >= 8, admin_routes
    auditor = await user_headers(client, "auditor@example.com")
    await _make(services, "auditor@example.com", UserRole.AUDITOR)
    key = (await client.post("/api/keys", json={"name": "k"}, headers=owner)).json()["key"]
    for method, path in admin_routes:
        url, body = path.format(**ids), ADMIN_BODIES.get((method, path))
        query = ADMIN_QUERIES.get((method, path))
        for who in (owner, bearer(key)):
            r = await client.request(method, url, headers=who, json=body, params=query)
            assert r.status_code == 403, (method, path, r.text)
        r = await client.request(method, url, headers=auditor, json=body, params=query)
        assert r.status_code == (200 if method == "GET" else 403), (method, path, r.text)
    me = (await client.get("/api/me", headers=owner)).json()
    assert me["user"]["id"] == ids["user_id"]
    r = await client.get(f"/api/admin/users/{ids['user_id']}", headers=auditor)
    assert r.json()["role"] == "user"  # the PATCH that would have made them admin did nothing


async def _make(services: Services, email: str, role: UserRole) -> None:
    async with services.db.transaction() as s:
        user = await users.find_user_by_email(s, email)
    assert user is not None
    manage = Management(services.db, services.audit, list(services.settings.qos.tiers))
    await manage.change(Actor.cli(), user.id, UserChange(role=role), "test")


def _operations(app: FastAPI) -> list[tuple[str, str]]:
    ops = []
    for path, item in app.openapi()["paths"].items():
        for method in item:
            ops.append((method.upper(), path))
    return ops


async def _owned_objects(client: httpx.AsyncClient, auth: dict[str, str]) -> dict[str, str]:
    owner_id = (await client.get("/api/me", headers=auth)).json()["user"]["id"]
    chat = (await client.post("/api/chats", json={"title": "secret"}, headers=auth)).json()
    key = (await client.post("/api/keys", json={"name": "k"}, headers=auth)).json()
    run = await client.post(
        f"/api/chats/{chat['id']}/messages",
        json={"content": "secret question"},
        headers={**auth, "Accept": "application/json"},
    )
    assert run.status_code == 202, run.text
    sessions = (await client.get("/api/sessions", headers=auth)).json()["data"]
    export = (await client.post("/api/exports", headers=auth)).json()
    share = (await client.post(f"/api/chats/{chat['id']}/shares", headers=auth)).json()
    upload = await client.post(
        f"/api/chats/{chat['id']}/attachments",
        params={"filename": "notes.txt"},
        content=b"secret notes",
        headers=auth,
    )
    assert upload.status_code == 201, upload.text
    return {
        "export_id": export["id"],
        "chat_id": chat["id"],
        "key_id": key["id"],
        "run_id": run.json()["run_id"],
        "message_id": run.json()["user_message_id"],
        "session_id": sessions[0]["id"],
        "share_id": share["id"],
        "attachment_id": upload.json()["id"],
        "token": share["url"].removeprefix("/s/"),
        "call_id": "call_1",  # a call of the owner's run: another user cannot answer it
        # models are the service's, not a user's: one no tier may use is everyone's 404
        "model_id": "no-such-model",
        # MCP servers are the operator's too: none here, so each is everyone's 404 (a user's
        # connections to one are theirs: tests/runs/test_mcp_oauth.py)
        "server": "no-such-server",
        "user_id": owner_id,
    }


async def test_every_route_with_an_id_is_404_for_another_user(
    client: httpx.AsyncClient, services: Services
) -> None:
    owner = await user_headers(client, "owner@example.com")
    other = await user_headers(client, "other@example.com")
    ids = await _owned_objects(client, owner)
    app = client._transport.app  # type: ignore[attr-defined]
    # a shared link reads for anyone with its token, another user too
    id_routes = [
        (m, p)
        for m, p in _operations(app)
        if "{" in p
        and p != "/api/shared/{token}"
        and not p.startswith(("/api/auth/oidc/", ADMIN_PREFIX))
    ]
    assert len(id_routes) >= 9, id_routes
    for method, path in id_routes:
        url = path.format(**ids)
        r = await client.request(method, url, headers=other, json=BODIES.get((method, path)))
        assert_error(r, 404)
    # and the owner's objects are untouched
    r = await client.get(f"/api/chats/{ids['chat_id']}", headers=owner)
    assert r.status_code == 200 and r.json()["title"] == "secret"
    r = await client.get(f"/api/runs/{ids['run_id']}", headers=owner)
    assert r.json()["status"] == "queued"  # the other user's cancel did nothing
    msgs = (await client.get(f"/api/chats/{ids['chat_id']}/messages", headers=owner)).json()
    assert len(msgs["data"]) == 2  # and their send added nothing
    keys = (await client.get("/api/keys", headers=owner)).json()["data"]
    assert [k["id"] for k in keys] == [ids["key_id"]]
    sessions = (await client.get("/api/sessions", headers=owner)).json()["data"]
    assert [s["id"] for s in sessions] == [ids["session_id"]]  # not ended by the other
    listing = (await client.get("/api/chats", headers=other)).json()
    assert listing["data"] == []


async def test_every_protected_route_needs_credentials(client: httpx.AsyncClient) -> None:
    owner = await user_headers(client, "owner@example.com")
    ids = await _owned_objects(client, owner)
    app = client._transport.app  # type: ignore[attr-defined]
    protected = [(m, p) for m, p in _operations(app) if p not in PUBLIC]
    assert len(protected) >= 10
    cases = {
        "missing": {},
        "wrong": bearer("ps_not-a-real-token"),
        "wrong key": bearer("pk_not-a-real-key"),
        "not bearer": {"Authorization": "Basic YTpi"},
        "empty bearer": {"Authorization": "Bearer "},
    }
    for method, path in protected:
        url = path.format(**ids)
        for name, headers in cases.items():
            r = await client.request(method, url, headers=headers, json=BODIES.get((method, path)))
            error = assert_error(r, 401)
            assert error["type"] == "authentication_error", (name, method, path)
            assert r.headers["www-authenticate"].startswith("Bearer")


async def test_expired_session_is_401(client: httpx.AsyncClient, services: Services) -> None:
    token = (await signup(client, "ada@example.com"))["token"]
    assert (await client.get("/api/me", headers=bearer(token))).status_code == 200
    async with services.db.transaction() as s:
        await s.execute(update(Session).values(expires_at=utcnow() - timedelta(seconds=1)))
    assert_error(await client.get("/api/me", headers=bearer(token)), 401, "invalid_token")


async def test_logout_revokes_the_session(client: httpx.AsyncClient) -> None:
    token = (await signup(client, "ada@example.com"))["token"]
    r = await client.post("/api/auth/logout", headers=bearer(token))
    assert r.status_code == 204
    assert_error(await client.get("/api/me", headers=bearer(token)), 401, "invalid_token")
    assert_error(await client.get("/api/chats", headers=bearer(token)), 401)


async def test_api_key_works_until_revoked(client: httpx.AsyncClient) -> None:
    auth = await user_headers(client, "ada@example.com")
    r = await client.post("/api/keys", json={"name": "laptop"}, headers=auth)
    assert r.status_code == 201
    created = r.json()
    secret = created["key"]
    assert secret.startswith("pk_") and created["hint"].endswith(secret[-4:])

    me = (await client.get("/api/me", headers=bearer(secret))).json()
    assert me["credential"] == "api_key"
    assert (await client.post("/api/chats", json={}, headers=bearer(secret))).status_code == 201
    listed = (await client.get("/api/keys", headers=auth)).json()["data"]
    assert [k["id"] for k in listed] == [created["id"]]
    assert "key" not in listed[0]  # the secret is shown once only
    assert listed[0]["last_used_at"] is not None

    # an API key cannot mint or revoke keys
    assert_error(
        await client.post("/api/keys", json={"name": "x"}, headers=bearer(secret)),
        403,
        "session_required",
    )
    r = await client.delete(f"/api/keys/{created['id']}", headers=auth)
    assert r.status_code == 200
    assert_error(await client.get("/api/me", headers=bearer(secret)), 401, "invalid_token")
    assert (await client.get("/api/keys", headers=auth)).json()["data"] == []
    assert_error(await client.delete(f"/api/keys/{created['id']}", headers=auth), 404)


async def test_cookie_requests_need_the_csrf_token_for_unsafe_methods(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post(
        "/api/auth/signup", json={"email": "ada@example.com", "password": PASSWORD}
    )
    csrf = r.json()["csrf_token"]
    set_cookie = r.headers.get_list("set-cookie")
    session_cookie = next(c for c in set_cookie if c.startswith("parley_session="))
    assert "HttpOnly" in session_cookie
    assert "SameSite=lax" in session_cookie or "samesite=lax" in session_cookie.lower()
    assert client.cookies.get("parley_session")

    # safe methods work with the cookie alone
    assert (await client.get("/api/chats")).status_code == 200
    # unsafe methods without the header fail, and nothing is created
    assert_error(await client.post("/api/chats", json={"title": "x"}), 403, "csrf_failed")
    for wrong in ("0" * 64, "é" * 64):  # not ASCII: a 403 too, not a 500
        assert_error(
            await client.post(
                "/api/chats", json={"title": "x"}, headers={b"X-CSRF-Token": wrong.encode()}
            ),
            403,
            "csrf_failed",
        )
    assert (await client.get("/api/chats")).json()["data"] == []
    r = await client.post("/api/chats", json={"title": "x"}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 201
    # the token of another session does not pass
    other = await client.post(
        "/api/auth/login", json={"email": "ada@example.com", "password": PASSWORD}
    )
    assert other.status_code == 200
    assert_error(
        await client.post("/api/chats", json={}, headers={"X-CSRF-Token": csrf}), 403, "csrf_failed"
    )
    assert_error(await client.post("/api/auth/logout"), 403, "csrf_failed")
    r = await client.post("/api/auth/logout", headers={"X-CSRF-Token": other.json()["csrf_token"]})
    assert r.status_code == 204
    assert_error(await client.get("/api/chats"), 401)


@pytest.mark.parametrize("known", [True, False])
async def test_repeated_failed_logins_are_slowed_down(
    client: httpx.AsyncClient, known: bool
) -> None:
    if known:
        await signup(client, "ada@example.com")
    wrong = {"email": "ada@example.com", "password": "wrong password"}
    for _ in range(5):
        r = await client.post("/api/auth/login", json=wrong)
        assert_error(r, 401, "invalid_login")
    r = await client.post(
        "/api/auth/login", json={"email": "ada@example.com", "password": PASSWORD}
    )
    assert_error(r, 429, "too_many_login_attempts")
    assert int(r.headers["retry-after"]) >= 1
    await asyncio.sleep(1.1)
    r = await client.post(
        "/api/auth/login", json={"email": "ada@example.com", "password": PASSWORD}
    )
    if known:
        assert r.status_code == 200, r.text
        # a success clears the account's record
        assert (await client.post("/api/auth/login", json=wrong)).status_code == 401
    else:
        assert_error(r, 401, "invalid_login")
        r = await client.post("/api/auth/login", json=wrong)
        error = assert_error(r, 429)
        assert int(r.headers["retry-after"]) >= 2, error
