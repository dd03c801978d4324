"""The proof-of-work after repeated failures (issue 44), over HTTP: a few wrong passwords
and the next sign-in needs a solved challenge — which the real owner solves and gets in
(no lock-out); a solution is refused when forged, tampered, expired or used twice; many
emails tried from one address (credential stuffing) and many sign-ups bring it on too."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

import parley.accounts.challenge as challenge_module
from tests.helpers import PASSWORD, assert_error, signup

WRONG = "not the password at all"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    limits = {
        "challenge_after_failures": 3,
        "challenge_after_email_failures": 10,
        "challenge_after_address_failures": 6,
        "signup_challenge_after": 3,
    }
    return {"accounts": {"challenge_max_number": 2000, **limits}}


def solve(challenge: dict[str, Any], **change: Any) -> str:
    """What the browser does: try every number until the hash matches."""
    salt, target = challenge["salt"], challenge["challenge"]
    number = next(
        n
        for n in range(challenge["maxnumber"] + 1)
        if hashlib.sha256(f"{salt}{n}".encode()).hexdigest() == target
    )
    found = {
        "algorithm": challenge["algorithm"],
        "challenge": target,
        "number": number,
        "salt": salt,
        "signature": challenge["signature"],
        **change,
    }
    return base64.b64encode(json.dumps(found).encode()).decode()


async def challenge(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.get("/api/auth/challenge")
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


async def login(
    client: httpx.AsyncClient, email: str, password: str, **more: Any
) -> httpx.Response:
    r = await client.post("/api/auth/login", json={"email": email, "password": password, **more})
    client.cookies.clear()
    return r


async def test_after_three_failures_the_owner_solves_a_challenge_and_signs_in(
    client: httpx.AsyncClient,
) -> None:
    await signup(client, "ada@example.com")
    for _ in range(3):
        assert_error(await login(client, "ada@example.com", WRONG), 401, "invalid_login")
    refused = await login(client, "ada@example.com", PASSWORD)
    assert_error(refused, 403, "challenge_required")
    assert refused.json()["error"]["param"] == "altcha"
    solved = solve(await challenge(client))
    r = await login(client, "ada@example.com", PASSWORD, altcha=solved)
    assert r.status_code == 200, r.text
    # a success forgets the failures: the next sign-in needs no challenge
    assert (await login(client, "ada@example.com", PASSWORD)).status_code == 200
    # another account from the same address is not held up by ada's failures
    await signup(client, "bob@example.com")
    assert (await login(client, "bob@example.com", PASSWORD)).status_code == 200


async def test_forged_tampered_expired_or_reused_solutions_are_refused(
    client: httpx.AsyncClient,
) -> None:
    await signup(client, "ada@example.com")
    for _ in range(3):
        await login(client, "ada@example.com", WRONG)
    fresh = await challenge(client)
    easy = "mine?expires=9999999999"  # a challenge of one's own, solved at once
    forged = {**fresh, "salt": easy, "challenge": hashlib.sha256(f"{easy}0".encode()).hexdigest()}
    bad = [
        solve(fresh, number=-1),  # not the number
        solve(fresh, signature="0" * 64),  # not signed by the server
        solve({**forged, "maxnumber": 0}),  # right hash, the server's signature of another
        "not base64 at all",
        base64.b64encode(b"[1, 2]").decode(),
        solve(fresh, number=True),
    ]
    for altcha in bad:
        assert_error(await login(client, "ada@example.com", PASSWORD, altcha=altcha), 403)
    once = solve(fresh)
    assert (await login(client, "ada@example.com", WRONG, altcha=once)).status_code == 401
    reused = await login(client, "ada@example.com", PASSWORD, altcha=once)
    assert_error(reused, 403, "challenge_required")
    assert "used" in reused.json()["error"]["message"]


async def test_a_solution_past_its_time_is_refused(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await signup(client, "ada@example.com")
    for _ in range(3):
        await login(client, "ada@example.com", WRONG)
    late = solve(await challenge(client))
    later = time.time() + 301  # challenge_seconds is 300
    monkeypatch.setattr(challenge_module, "time", SimpleNamespace(time=lambda: later))
    assert_error(await login(client, "ada@example.com", PASSWORD, altcha=late), 403)
    monkeypatch.undo()
    fresh = solve(await challenge(client))
    assert (await login(client, "ada@example.com", PASSWORD, altcha=fresh)).status_code == 200


async def test_many_emails_from_one_address_bring_the_challenge_on(
    client: httpx.AsyncClient,
) -> None:
    await signup(client, "zed@example.com")
    for i in range(6):  # one try each at six accounts: credential stuffing
        await login(client, f"victim{i}@example.com", WRONG)
    assert_error(await login(client, "zed@example.com", PASSWORD), 403, "challenge_required")


async def test_sign_ups_past_a_few_from_one_address_need_a_challenge(
    client: httpx.AsyncClient,
) -> None:
    for i in range(3):
        await signup(client, f"new{i}@example.com")
    body = {"email": "new3@example.com", "password": PASSWORD}
    assert_error(await client.post("/api/auth/signup", json=body), 403, "challenge_required")
    body["altcha"] = solve(await challenge(client))
    r = await client.post("/api/auth/signup", json=body)
    assert r.status_code == 201, r.text
