"""Account recovery (issue 45) against a real SMTP server process (aiosmtpd, STARTTLS and a
login), on both stacks with their background work running: forgot → mail → link → new
password → signed in, the old sessions refused; a used, tampered, expired link refused, one
user's link changes only that user; the same answer for known and unknown emails (and an
account without a password is told so by mail, not by the answer); throttling; a mail
server that is down answers "try again later" and loses nothing already queued; an admin's
link to hand over; notices of a password change and a new API key."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event, update

from parley.domain import UserRole, utcnow
from parley.services import Services
from parley.store.account_tokens import AccountToken
from tests.accounts.mail_server import MailServer, body
from tests.accounts.test_audit import make, records
from tests.helpers import PASSWORD, assert_error, bearer, signup
from tests.waiting import eventually

NEW = "a brand new passphrase"
SUBJECT = "Reset your parley password"
CHANGED = "Your parley password was changed"


@pytest.fixture
def smtp(tmp_path: Path) -> Iterator[MailServer]:
    server = MailServer(tmp_path, tls=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def run_overrides(smtp: MailServer) -> dict[str, Any]:
    return {"mail": smtp.settings()}


@pytest.fixture
def settings_overrides(smtp: MailServer) -> dict[str, Any]:
    return {"mail": smtp.settings()}


def link_token(message: Any) -> str:
    found = re.search(r"/#reset=(\S+)", body(message))
    assert found, body(message)
    return found.group(1)


async def ask(client: httpx.AsyncClient, email: str) -> httpx.Response:
    return await client.post("/api/auth/password-reset", json={"email": email})


async def confirm(client: httpx.AsyncClient, token: str, password: str = NEW) -> httpx.Response:
    r = await client.post(
        "/api/auth/password-reset/confirm", json={"token": token, "password": password}
    )
    client.cookies.clear()
    return r


async def login(client: httpx.AsyncClient, email: str, password: str) -> int:
    r = await client.post("/api/auth/login", json={"email": email, "password": password})
    client.cookies.clear()
    return r.status_code


async def test_forgot_mail_link_new_password_signed_in_old_sessions_refused(
    run_client: httpx.AsyncClient, run_services: Services, smtp: MailServer
) -> None:
    old = (await signup(run_client, "ada@example.com"))["token"]
    r = await ask(run_client, "Ada@Example.com")
    assert (r.status_code, r.json()["status"]) == (202, "accepted"), r.text
    (mail,) = await smtp.wait_for("ada@example.com", SUBJECT)
    assert "30 minutes" in body(mail)
    r = await confirm(run_client, link_token(mail))
    assert r.status_code == 200, r.text
    assert r.json()["user"]["email"] == "ada@example.com"
    assert (await run_client.get("/api/me", headers=bearer(r.json()["token"]))).status_code == 200
    assert (await run_client.get("/api/me", headers=bearer(old))).status_code == 401
    assert await login(run_client, "ada@example.com", PASSWORD) == 401
    assert await login(run_client, "ada@example.com", NEW) == 200
    await smtp.wait_for("ada@example.com", CHANGED)
    await signup(run_client, "root@example.com")
    await make(run_services, "root@example.com", UserRole.AUDITOR)
    root = bearer((await run_client.post("/api/auth/login", json={
        "email": "root@example.com", "password": PASSWORD})).json()["token"])  # fmt: skip
    done = await records(run_client, root, action="account.password_reset")
    assert [(d["actor"], d["detail"]["via"]) for d in done] == [("ada@example.com", "mail")]


async def test_used_tampered_expired_and_other_users_links_are_refused(
    run_client: httpx.AsyncClient, run_services: Services, smtp: MailServer
) -> None:
    await signup(run_client, "ada@example.com")
    await signup(run_client, "bob@example.com")
    for who in ("ada@example.com", "ada@example.com", "bob@example.com"):
        assert (await ask(run_client, who)).status_code == 202
    first, second = (link_token(m) for m in await smtp.wait_for("ada@example.com", SUBJECT, 2))
    (bobs,) = (link_token(m) for m in await smtp.wait_for("bob@example.com", SUBJECT))
    assert_error(await confirm(run_client, first[:-2] + "xx"), 400, "invalid_reset_link")
    assert_error(await confirm(run_client, "short"), 422)
    weak = await confirm(run_client, first, "password")
    assert_error(weak, 422, "weak_password")  # refused: the link still works
    assert (await confirm(run_client, first)).status_code == 200
    assert_error(await confirm(run_client, first, NEW + "!"), 400, "invalid_reset_link")
    assert_error(await confirm(run_client, second), 400, "invalid_reset_link")  # spent too
    assert await login(run_client, "bob@example.com", PASSWORD) == 200  # ada's link: ada's only
    async with run_services.db.transaction() as s:
        await s.execute(update(AccountToken).values(expires_at=utcnow()))
    assert_error(await confirm(run_client, bobs), 400, "invalid_reset_link")
    assert await login(run_client, "bob@example.com", PASSWORD) == 200


async def test_known_and_unknown_emails_get_the_same_answer_after_the_same_work(
    client: httpx.AsyncClient, services: Services, smtp: MailServer
) -> None:
    """Over the app with no background work (nothing else touches the database): the very
    same statements for both; what the outbox's delivery does later is its own."""
    await signup(client, "ada@example.com")
    asked: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "mail_outbox" in statement or "users" in statement or "account_tokens" in statement:
            asked.append(statement)

    engine = services.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        known = await ask(client, "ada@example.com")
        known_work, asked[:] = list(asked), []
        unknown = await ask(client, "no@one.org")
        unknown_work = list(asked)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert known.status_code == unknown.status_code == 202
    assert known.json() == unknown.json()
    assert set(known.headers) == set(unknown.headers)
    assert known_work == unknown_work and any("INSERT" in w for w in known_work)
    outbox = services.accounts.recovery.outbox
    assert outbox is not None
    assert await outbox.deliver_due(services.accounts.recovery.compose) == 1
    assert [m["To"] for m in smtp.messages()] == ["ada@example.com"]


async def test_throttled_per_address_and_per_email(
    run_client: httpx.AsyncClient, smtp: MailServer
) -> None:
    del smtp
    for i in range(3):
        assert (await ask(run_client, "ada@example.com")).status_code == 202, i
    assert_error(await ask(run_client, "ada@example.com"), 429, "too_many_reset_requests")
    # five asked from this address in all (the one refused for its email counts here)
    assert (await ask(run_client, "other@example.com")).status_code == 202
    assert_error(await ask(run_client, "fresh@example.com"), 429, "too_many_reset_requests")


async def test_a_mail_server_down_says_try_later_and_loses_nothing_queued(
    run_client: httpx.AsyncClient, smtp: MailServer
) -> None:
    await signup(run_client, "ada@example.com")
    assert (await ask(run_client, "ada@example.com")).status_code == 202
    await smtp.wait_for("ada@example.com", SUBJECT)  # the server answered: trusted a while
    smtp.stop()
    assert (await ask(run_client, "ada@example.com")).status_code == 202  # queued...

    async def refused() -> bool:  # ...its send fails, and from then on every ask is told
        r = await ask(run_client, "nobody@example.org")
        return r.status_code == 503

    await eventually(refused, "the asks to be refused while the server is down")
    for email in ("ada@example.com", "nobody@example.org"):
        r = await ask(run_client, email)
        assert_error(r, 503, "mail_unavailable")
        assert "try again" in r.json()["error"]["message"]
    smtp.start()  # the queued mail goes out once the server is back
    await smtp.wait_for("ada@example.com", SUBJECT, count=2)


async def test_an_account_without_a_password_is_told_by_mail_and_the_admin_link(
    run_client: httpx.AsyncClient, run_services: Services, smtp: MailServer
) -> None:
    async with run_services.db.transaction() as s:
        await run_services.accounts.create_sso_user(s, "sso@example.com", "corp")
    assert (await ask(run_client, "sso@example.com")).status_code == 202
    (mail,) = await smtp.wait_for("sso@example.com", "Signing in to parley")
    assert "has no password" in body(mail) and "#reset=" not in body(mail)

    await signup(run_client, "root@example.com")
    await make(run_services, "root@example.com", UserRole.ADMIN)
    root = bearer((await run_client.post("/api/auth/login", json={
        "email": "root@example.com", "password": PASSWORD})).json()["token"])  # fmt: skip
    found = (await run_client.get("/api/admin/users", params={"q": "sso@"}, headers=root)).json()
    sso_id = found["data"][0]["id"]
    r = await run_client.post(f"/api/admin/users/{sso_id}/reset-link", headers=root)
    assert_error(r, 409, "no_password")
    ada = await signup(run_client, "ada@example.com")
    r = await run_client.post(f"/api/admin/users/{ada['user']['id']}/reset-link", headers=root)
    assert r.status_code == 200, r.text
    token = r.json()["url"].split("#reset=")[1]
    assert (await confirm(run_client, token)).status_code == 200
    assert await login(run_client, "ada@example.com", NEW) == 200
    user = bearer((await signup(run_client, "eve@example.com"))["token"])
    r = await run_client.post(f"/api/admin/users/{ada['user']['id']}/reset-link", headers=user)
    assert_error(r, 403)
    made = await records(run_client, root, action="user.reset_link_made")
    assert [m["actor"] for m in made] == ["root@example.com"]


async def test_a_new_key_and_a_password_change_are_told_by_mail(
    run_client: httpx.AsyncClient, smtp: MailServer
) -> None:
    me = bearer((await signup(run_client, "ada@example.com"))["token"])
    r = await run_client.post("/api/keys", json={"name": "laptop"}, headers=me)
    assert r.status_code == 201, r.text
    (mail,) = await smtp.wait_for("ada@example.com", "A new parley API key")
    assert "'laptop'" in body(mail)
    change = {"current_password": PASSWORD, "new_password": NEW}
    assert (await run_client.post("/api/auth/password", json=change, headers=me)).status_code == 200
    await smtp.wait_for("ada@example.com", CHANGED)


@pytest.mark.parametrize("run_overrides", [{}])
async def test_without_mail_the_ask_says_whom_to_ask(run_client: httpx.AsyncClient) -> None:
    r = await ask(run_client, "ada@example.com")
    assert_error(r, 409, "mail_not_configured")
    options = (await run_client.get("/api/auth/providers")).json()
    assert options["password_reset_by_mail"] is False
