"""Confirming a new account's email by mail (issue 45), against a real SMTP server process,
on both stacks: with `confirm_email = "chat"` the account signs in but may not chat (nor
use `/v1`) until it follows the mailed link; with `"signin"` it gets no session until
then, and may ask for another link; a link works once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.accounts.mail_server import MailServer, body
from tests.helpers import PASSWORD, assert_error, bearer
from tests.runs.helpers import new_chat, send_json

SUBJECT = "Confirm your email for parley"


@pytest.fixture
def smtp(tmp_path: Path) -> Iterator[MailServer]:
    server = MailServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def run_overrides(smtp: MailServer, request: pytest.FixtureRequest) -> dict[str, Any]:
    mode = getattr(request, "param", "chat")
    return {"mail": smtp.settings(), "accounts": {"confirm_email": mode}}


def token_of(message: Any) -> str:
    found = re.search(r"/#confirm=(\S+)", body(message))
    assert found, body(message)
    return found.group(1)


async def test_an_unconfirmed_account_signs_in_but_chats_only_once_confirmed(
    run_client: httpx.AsyncClient, smtp: MailServer
) -> None:
    r = await run_client.post(
        "/api/auth/signup", json={"email": "ada@example.com", "password": PASSWORD}
    )
    assert r.status_code == 201, r.text
    me = bearer(r.json()["token"])
    run_client.cookies.clear()
    chat = await new_chat(run_client, me)
    refused = await run_client.post(
        f"/api/chats/{chat}/messages", json={"content": "hi"},
        headers={**me, "Accept": "application/json"},
    )  # fmt: skip
    assert_error(refused, 403, "email_unconfirmed")
    key = (await run_client.post("/api/keys", json={"name": "k"}, headers=me)).json()["key"]
    v1 = await run_client.post(
        "/v1/chat/completions",
        json={"model": "parley-fake", "messages": [{"role": "user", "content": "hi"}]},
        headers=bearer(key),
    )
    assert_error(v1, 403, "email_unconfirmed")
    (mail,) = await smtp.wait_for("ada@example.com", SUBJECT)
    token = token_of(mail)
    r = await run_client.post("/api/auth/confirm", json={"token": token})
    assert (r.status_code, r.json()["email"]) == (200, "ada@example.com"), r.text
    assert (await send_json(run_client, me, chat, "hi"))["run_id"]
    assert_error(await run_client.post("/api/auth/confirm", json={"token": token}), 400)


@pytest.mark.parametrize("run_overrides", ["signin"], indirect=True)
async def test_with_signin_mode_no_session_until_the_link_and_another_on_request(
    run_client: httpx.AsyncClient, smtp: MailServer
) -> None:
    creds = {"email": "bob@example.com", "password": PASSWORD}
    r = await run_client.post("/api/auth/signup", json=creds)
    assert (r.status_code, r.json()["status"]) == (202, "confirm_email"), r.text
    assert "token" not in r.json()
    run_client.cookies.clear()
    assert_error(await run_client.post("/api/auth/login", json=creds), 401, "email_unconfirmed")
    again = await run_client.post("/api/auth/confirm/resend", json={"email": "bob@example.com"})
    assert again.status_code == 202, again.text
    first, second = (token_of(m) for m in await smtp.wait_for("bob@example.com", SUBJECT, 2))
    assert (await run_client.post("/api/auth/confirm", json={"token": second})).status_code == 200
    r = await run_client.post("/api/auth/login", json=creds)
    assert r.status_code == 200, r.text
    assert (await run_client.get("/api/me", headers=bearer(r.json()["token"]))).status_code == 200
    del first
