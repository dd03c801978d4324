"""Secrets handed to clients: session tokens, API keys, CSRF tokens.

Session tokens and API keys are 256-bit random strings; only their SHA-256
hashes are stored (a fast hash is right for high-entropy secrets). The CSRF
token is an HMAC of the session id under the server's secret key.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SESSION_TOKEN_PREFIX = "ps_"  # noqa: S105
API_KEY_PREFIX = "pk_"


def new_session_token() -> str:
    return SESSION_TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def key_hint(key: str) -> str:
    """What a key list shows of a key: its prefix and last four characters."""
    return f"{key[: len(API_KEY_PREFIX)]}…{key[-4:]}"


def csrf_token(secret_key: str, session_id: str) -> str:
    return hmac.new(secret_key.encode(), session_id.encode(), hashlib.sha256).hexdigest()


def csrf_token_valid(secret_key: str, session_id: str, presented: str | None) -> bool:
    if not presented:
        return False
    # as bytes: a str with non-ASCII characters makes compare_digest raise (a 500)
    return hmac.compare_digest(csrf_token(secret_key, session_id).encode(), presented.encode())
