"""The classifier contract: a text in, allowed or blocked (with a category and a reason) out.

Every way parley checks content is a ``Classifier``: the built-in rule set (``rules.py``),
an OpenAI-compatible ``/v1/moderations`` endpoint (``endpoint.py``) and a guard model served
by an OpenAI-compatible engine (``guard.py``). A classifier that cannot answer raises
(``ClassifierFailed`` or any other exception, or it is timed out by the ``Moderator``); the
moderator then applies that classifier's fail mode, so a classifier itself never decides
what its own failure means.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class Stage(StrEnum):
    """What is checked: a user's prompt before admission, or an answer while it streams."""

    INPUT = "input"
    OUTPUT = "output"


@dataclass(frozen=True, slots=True)
class Sample:
    """One text to check. For an answer, ``prompt`` is the user's message it answers (a
    guard model reads the turn, the answer as the assistant's part)."""

    text: str
    stage: Stage
    prompt: str = ""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A classifier's answer: allowed, or blocked in ``category`` for ``reason``."""

    blocked: bool
    category: str | None = None
    reason: str | None = None


ALLOWED = Verdict(blocked=False)


class ClassifierFailed(Exception):
    """The classifier could not give a verdict (unreachable, an error, an answer it could
    not read); its fail mode decides."""


class Classifier(Protocol):
    name: str

    async def check(self, sample: Sample) -> Verdict:
        """The verdict on ``sample``; raises when it cannot give one."""

    async def close(self) -> None:
        """Let go of connections."""
