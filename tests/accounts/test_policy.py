"""The password policy (``accounts/policy.py``): length, whitespace, the email, common
passwords; applied by the HTTP sign-up and password change, and by the CLI."""

from __future__ import annotations

import httpx
import pytest

from parley.accounts.policy import check_password
from parley.errors import ValidationFailed
from tests.helpers import PASSWORD, assert_error, bearer, signup

# Every password the suites, the benchmarks and the fuzz script sign up with must stay valid.
SUITE_PASSWORDS = [
    PASSWORD,
    "correct horse battery staple",  # tests/e2e
    "operator password",
    "another pw1",
    "team password",
    "long enough pw",
    "long password",
    "bench password",
    "fuzzing password",
]

COMMON = ["password", "password123", "12345678", "qwertyuiop", "iloveyou", "Password1", "11111111"]


def _refusal(password: str, email: str | None = "ada.lovelace@example.com") -> ValidationFailed:
    with pytest.raises(ValidationFailed) as caught:
        check_password(password, email=email)
    return caught.value


@pytest.mark.parametrize("password", SUITE_PASSWORDS)
def test_the_passwords_the_suite_uses_are_accepted(password: str) -> None:
    check_password(password, email="ada@example.com")


@pytest.mark.parametrize("password", COMMON)
def test_common_passwords_are_refused_with_the_reason(password: str) -> None:
    error = _refusal(password)
    assert (error.code, error.param) == ("weak_password", "password")
    assert "common" in error.message or "guess" in error.message


@pytest.mark.parametrize("password", [" " * 12, "\t \n \u3000  \u00a0  ", "\u200b" * 10])
def test_blank_passwords_are_refused(password: str) -> None:
    error = _refusal(password)
    assert error.code == "weak_password"
    assert "space" in error.message or "visible" in error.message


@pytest.mark.parametrize(
    "password",
    ["ada.lovelace@example.com", "ADA.Lovelace@Example.com", "ada.lovelace", " ada.lovelace "],
)
def test_the_email_or_its_local_part_is_refused(password: str) -> None:
    error = _refusal(password)
    assert error.code == "weak_password"
    assert "email" in error.message


def test_length_and_nul_rules_stay() -> None:
    assert _refusal("Xk2#pq").code == "invalid_password"
    assert _refusal("x" * 1025).code == "invalid_password"
    assert _refusal("long enough\x00pw").code == "invalid_password"
    check_password("Zq8#vLp2 wT" + "k" * 200)  # long passwords are judged on their start
    error = _refusal("a" * 100)
    assert error.code == "weak_password" and "guess" in error.message


def test_the_parameter_name_is_the_caller_s() -> None:
    with pytest.raises(ValidationFailed) as caught:
        check_password("password123", param="new_password")
    assert caught.value.param == "new_password"


async def test_sign_up_refuses_weak_passwords_over_http(client: httpx.AsyncClient) -> None:
    cases = {
        "password123": "common",
        "            ": "space",
        "ada.lovelace@example.com": "email",
        "ada.lovelace": "email",
    }
    for password, reason in cases.items():
        r = await client.post(
            "/api/auth/signup", json={"email": "ada.lovelace@example.com", "password": password}
        )
        error = assert_error(r, 422, "weak_password")
        assert error["param"] == "password"
        assert reason in error["message"], error
    r = await client.post(
        "/api/auth/signup", json={"email": "ada.lovelace@example.com", "password": PASSWORD}
    )
    assert r.status_code == 201


async def test_a_password_change_applies_the_policy(client: httpx.AsyncClient) -> None:
    token = (await signup(client, "ada.lovelace@example.com"))["token"]
    for new in ("iloveyou", "ada.lovelace", "          "):
        body = {"current_password": PASSWORD, "new_password": new}
        r = await client.post("/api/auth/password", json=body, headers=bearer(token))
        assert assert_error(r, 422, "weak_password")["param"] == "new_password"
