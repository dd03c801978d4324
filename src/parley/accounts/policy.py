"""What an account's email and password must be, wherever an account is made (the HTTP
sign-up, whose schema states the same bounds for the OpenAPI document, and the CLI)."""

from __future__ import annotations

from pydantic import EmailStr, TypeAdapter, ValidationError

from parley.errors import ValidationFailed

PASSWORD_MIN_CHARS = 8
PASSWORD_MAX_CHARS = 1024
EMAIL_MAX_CHARS = 320

_EMAIL: TypeAdapter[str] = TypeAdapter(EmailStr)


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


def check_password(password: str) -> None:
    """ValidationFailed (``password``) unless the password may be used."""
    if not PASSWORD_MIN_CHARS <= len(password) <= PASSWORD_MAX_CHARS:
        raise ValidationFailed(
            f"password must be {PASSWORD_MIN_CHARS} to {PASSWORD_MAX_CHARS} characters",
            code="invalid_password",
            param="password",
        )
    if "\x00" in password:
        raise ValidationFailed(
            "password must not contain NUL characters", code="invalid_password", param="password"
        )
