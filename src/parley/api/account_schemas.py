"""Wire types of the sign-in's proof-of-work and of the user's preferences."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from parley.api.schemas import Instructions, Strict
from parley.domain import Theme


class ChallengeOut(BaseModel):
    """ALTCHA's challenge: find `number` in [0, `maxnumber`] with SHA-256(`salt` + `number`)
    = `challenge` (hex), then send base64 of `{algorithm, challenge, number, salt,
    signature}` as `altcha`."""

    algorithm: str
    challenge: str
    maxnumber: int
    salt: str
    signature: str


class PreferencesIn(Strict):
    """Any of these; what is left out stays as it is."""

    theme: Theme | None = None
    instructions: Instructions | None = Field(
        None, description='What every answer of yours heeds (added to its prompt); "" clears them.'
    )


class ConfirmFirst(BaseModel):
    """A sign-up that must confirm its email before it signs in."""

    status: Literal["confirm_email"] = "confirm_email"
    message: str = "Check your mail: follow the link in it to confirm your email, then log in."
