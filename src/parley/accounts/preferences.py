"""A user's preferences, set from any device: the web client's theme, and the instructions
every answer of theirs heeds (added to each prompt by the context assembly)."""

from __future__ import annotations

from dataclasses import dataclass

from parley.domain import Theme, utcnow
from parley.store.schema import User


@dataclass(frozen=True, slots=True)
class Preferences:
    """What changes (None: left as it is; instructions "" clears them)."""

    theme: Theme | None = None
    instructions: str | None = None

    def apply(self, user: User) -> None:
        if self.theme is not None:
            user.theme = self.theme.value
        if self.instructions is not None:
            user.instructions = self.instructions or None
        if self != UNCHANGED:
            user.updated_at = utcnow()


UNCHANGED = Preferences()
