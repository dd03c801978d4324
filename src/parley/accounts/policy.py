"""What an account's email and password must be, wherever one is set: the HTTP sign-up (its
schema states the length bounds for the OpenAPI document), the password change, and the CLI.

A password (OWASP ASVS 2.1) is 8 to 1024 characters, of any kind (spaces and any Unicode
included), without NUL, and is refused, with the reason, when it is:

* only spaces or other invisible characters;
* the account's email address, or the part before the ``@`` (letter case and surrounding
  spaces ignored);
* easy to guess: zxcvbn (its bundled lists of the 30,000 most common passwords, English
  words, names; keyboard patterns, repeats, sequences, dates, l33t spellings) estimates it
  falls in fewer than ``MIN_GUESSES`` guesses. zxcvbn reads at most ``ZXCVBN_MAX_CHARS``
  characters: a longer password is judged by its start.
"""

from __future__ import annotations

import threading

import zxcvbn
from pydantic import EmailStr, TypeAdapter, ValidationError

from parley.errors import ValidationFailed
from parley.text import has_visible

PASSWORD_MIN_CHARS = 8
PASSWORD_MAX_CHARS = 1024
EMAIL_MAX_CHARS = 320
# zxcvbn's "score 2": safe from an online attack that is throttled (as logins are here)
MIN_GUESSES = 10**6
ZXCVBN_MAX_CHARS = 72

_EMAIL: TypeAdapter[str] = TypeAdapter(EmailStr)
# zxcvbn keeps the user inputs of a call in a module-level dictionary: one call at a time
_ZXCVBN_LOCK = threading.Lock()


def checked_email(email: str) -> str:
    """The address as entered, if it is one; ValidationFailed (``email``) if not."""
    if len(email) > EMAIL_MAX_CHARS:
        raise ValidationFailed(
            f"email must be at most {EMAIL_MAX_CHARS} characters",
            code="invalid_email",
            param="email",
        )
    try:
        return _EMAIL.validate_python(email)
    except ValidationError as e:
        reason = e.errors()[0].get("msg", "not an email address")
        raise ValidationFailed(f"email: {reason}", code="invalid_email", param="email") from None


def check_password(password: str, *, email: str | None = None, param: str = "password") -> None:
    """ValidationFailed (``param``) unless the password may be used by ``email``'s account:
    ``invalid_password`` for the length and NUL rules, ``weak_password`` with the reason for
    the others."""
    if not PASSWORD_MIN_CHARS <= len(password) <= PASSWORD_MAX_CHARS:
        raise ValidationFailed(
            f"password must be {PASSWORD_MIN_CHARS} to {PASSWORD_MAX_CHARS} characters",
            code="invalid_password",
            param=param,
        )
    if "\x00" in password:
        raise ValidationFailed(
            "password must not contain NUL characters", code="invalid_password", param=param
        )
    reason = weakness(password, email)
    if reason is not None:
        raise ValidationFailed(
            f"choose another password: {reason}", code="weak_password", param=param
        )


def weakness(password: str, email: str | None = None) -> str | None:
    """Why the password is too weak, or None."""
    if not has_visible(password):
        return "it is only spaces or invisible characters"
    own = _email_parts(email)
    if password.strip().casefold() in own:
        return "it is your email address, or the part of it before the @"
    with _ZXCVBN_LOCK:
        verdict = zxcvbn.zxcvbn(password[:ZXCVBN_MAX_CHARS], user_inputs=sorted(own))
    if float(verdict["guesses"]) >= MIN_GUESSES:
        return None
    warning = str(verdict["feedback"]["warning"] or "").rstrip(".")
    if warning:
        return f"it is too easy to guess ({warning[0].lower()}{warning[1:]})"
    return "it is too easy to guess (a common password, word or pattern)"


def _email_parts(email: str | None) -> set[str]:
    if not email:
        return set()
    address = email.strip().casefold()
    return {address, address.partition("@")[0]} - {""}
