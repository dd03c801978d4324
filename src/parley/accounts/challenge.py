"""A self-hosted proof-of-work before a sign-in or sign-up that follows repeated failures
(ALTCHA's scheme, no third party): the server picks a secret number up to ``max_number``
and publishes ``challenge = SHA-256(salt + number)`` with its HMAC; the browser finds the
number by trying them all (about a second of its CPU), and sends it back as ``altcha`` —
base64 of ``{algorithm, challenge, number, salt, signature}``. The server checks the HMAC
(so nobody forges an easy one), the hash, the expiry carried in the salt, and that no
solution is used twice (on the bus, so every api process agrees). A guesser pays a second
of CPU per guess; the real owner, the same second once — never locked out."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from parley.bus.interface import AttemptThrottles, Backoff
from parley.errors import PermissionDenied

ALGORITHM = "SHA-256"


class ChallengeRequired(PermissionDenied):
    code = "challenge_required"


@dataclass(frozen=True, slots=True)
class Challenge:
    algorithm: str
    challenge: str
    maxnumber: int
    salt: str
    signature: str


class ProofOfWork:
    def __init__(
        self, secret: str, bus: AttemptThrottles, *, max_number: int, seconds: float
    ) -> None:
        self._key = hashlib.sha256(b"parley-altcha\x00" + secret.encode()).digest()
        self._bus = bus
        self._max = max_number
        self._seconds = seconds
        self._once = Backoff(free=1, max_delay=seconds, forget_after=seconds)

    def issue(self) -> Challenge:
        expires = int(time.time() + self._seconds)
        salt = f"{secrets.token_hex(12)}?expires={expires}"
        number = secrets.randbelow(self._max + 1)
        challenge = _sha256(f"{salt}{number}")
        return Challenge(ALGORITHM, challenge, self._max, salt, self._sign(challenge))

    async def check(self, payload: str | None) -> None:
        """ChallengeRequired unless ``payload`` is a fresh, unused solution."""
        if not payload:
            raise ChallengeRequired(
                "too many failed attempts: solve the proof-of-work challenge "
                "(GET /api/auth/challenge) and send it as `altcha`",
                param="altcha",
            )
        solved = _decoded(payload)
        if solved is None or not self._valid(solved):
            raise ChallengeRequired(
                "the proof-of-work solution is wrong or expired", param="altcha"
            )
        first = await self._bus.attempt(f"altcha\x1f{solved['signature']}", self._once)
        if not first.allowed:
            raise ChallengeRequired("that proof-of-work solution was used", param="altcha")

    def _valid(self, solved: dict[str, Any]) -> bool:
        challenge, salt, number = solved["challenge"], solved["salt"], solved["number"]
        if solved["algorithm"] != ALGORITHM or not hmac.compare_digest(
            self._sign(challenge), solved["signature"]
        ):
            return False
        if not hmac.compare_digest(_sha256(f"{salt}{number}"), challenge):
            return False
        return _expires(salt) > time.time()

    def _sign(self, challenge: str) -> str:
        return hmac.new(self._key, challenge.encode(), hashlib.sha256).hexdigest()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _decoded(payload: str) -> dict[str, Any] | None:
    """The solution's fields, each of its type, or None."""
    try:
        found = json.loads(base64.b64decode(payload[:4000], validate=True))
    except ValueError:
        return None
    kinds = {"algorithm": str, "challenge": str, "salt": str, "signature": str, "number": int}
    if not isinstance(found, dict) or any(
        not isinstance(found.get(k), t) or isinstance(found.get(k), bool) for k, t in kinds.items()
    ):
        return None
    return found


def _expires(salt: str) -> float:
    _, _, query = salt.partition("?")
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name == "expires" and value.isdigit():
            return float(value)
    return 0.0
