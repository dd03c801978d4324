"""Secrets parley keeps for users (an MCP server's tokens, its client registration, a
connection's pending state): sealed with a key derived from ``secret_key`` for one purpose
(Fernet: AES-128-CBC with HMAC-SHA256, timestamped), so a database dump holds none of them
in the clear, and a value sealed for one purpose never opens for another."""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


class Unsealable(Exception):
    """A value that was not sealed by this key for this purpose, was altered, or is too old."""


class Sealer:
    def __init__(self, secret_key: str, purpose: str) -> None:
        derived = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=f"parley:{purpose}".encode()
        ).derive(secret_key.encode())
        self._fernet = Fernet(base64.urlsafe_b64encode(derived))

    def seal(self, text: str) -> str:
        return self._fernet.encrypt(text.encode()).decode()

    def open(self, sealed: str, max_age_seconds: float | None = None) -> str:
        ttl = None if max_age_seconds is None else max(1, int(max_age_seconds))
        try:
            return self._fernet.decrypt(sealed.encode(), ttl=ttl).decode()
        except (InvalidToken, ValueError) as e:
            raise Unsealable("not a value this server sealed, or expired") from e
