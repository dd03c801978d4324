"""The safety settings: the classifiers an operator configures, each by name.

``Settings.safety.classifiers`` maps a name to one classifier's settings (``kind`` says
which: ``rules``, ``endpoint`` or ``guard``); each tier names the classifiers its input and
its output go through (``TierSettings.moderation``). Validated at start-up: every pattern
compiles, every name a tier uses is configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Literal

import regex
from pydantic import BaseModel, Field, field_validator

from parley.engines.settings import BearerKey
from parley.safety.interface import Stage

if TYPE_CHECKING:
    from parley.tiers import TierSettings

CATEGORY_NAME = r"^[a-z0-9][a-z0-9_.-]{0,63}$"


class FailMode(StrEnum):
    """What a classifier's failure (an error, or no verdict within its timeout) means:
    ``open`` lets the text through, ``closed`` refuses it."""

    OPEN = "open"
    CLOSED = "closed"


class RuleCategory(BaseModel):
    """One category of the rule set: regular expressions (case-insensitive, Python's
    ``regex`` syntax) any of which blocks a text, at the stages named."""

    model_config = {"extra": "forbid"}

    patterns: list[str] = Field(min_length=1)
    stages: list[Stage] = Field(default_factory=lambda: [Stage.INPUT, Stage.OUTPUT], min_length=1)
    reason: str | None = Field(
        default=None, max_length=300, description="Shown to the user; default: the category."
    )

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                regex.compile(pattern)
            except regex.error as e:
                raise ValueError(f"pattern {pattern!r} does not compile: {e}") from e
        return patterns


def default_categories() -> dict[str, RuleCategory]:
    """What the built-in rule set blocks out of the box: an answer that spells out a private
    key. Operators add their own categories (docs/SAFETY.md)."""
    return {
        "secrets": RuleCategory(
            patterns=[r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED )?PRIVATE KEY-----"],
            stages=[Stage.OUTPUT],
            reason="the answer contains a private key",
        )
    }


class RulesSettings(BaseModel):
    """The built-in rule set: no model, microseconds a check. Input: every category that
    applies to input, and the prompt-injection heuristics; output: scanned as it streams,
    each piece checked before it is sent."""

    model_config = {"extra": "forbid"}

    kind: Literal["rules"] = "rules"
    categories: dict[Annotated[str, Field(pattern=CATEGORY_NAME)], RuleCategory] = Field(
        default_factory=default_categories
    )
    prompt_injection: bool = Field(
        default=True, description="Refuse prompts that try to override the system's instructions."
    )
    fail_mode: FailMode = FailMode.CLOSED


class _Remote(BearerKey):
    base_url: str = Field(
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="Up to and including /v1, e.g. http://moderation:8000/v1.",
    )
    timeout_seconds: float = Field(default=2.0, gt=0, le=120)
    fail_mode: FailMode = FailMode.OPEN


class EndpointSettings(_Remote):
    """An OpenAI-compatible ``POST {base_url}/moderations``: blocked when the result is
    flagged (in one of ``categories``, when given)."""

    model_config = {"extra": "forbid"}

    kind: Literal["endpoint"] = "endpoint"
    model: str | None = Field(default=None, description="Sent as `model`; default: none sent.")
    categories: list[str] | None = Field(
        default=None, description="Only these of the endpoint's categories block; default: any."
    )


def llama_guard_categories() -> dict[str, str]:
    """Llama Guard 3's hazard codes and the names parley reports them by."""
    names = (
        "violent_crimes non_violent_crimes sex_related_crimes child_sexual_exploitation "
        "defamation specialized_advice privacy intellectual_property indiscriminate_weapons "
        "hate suicide_self_harm sexual_content elections code_interpreter_abuse"
    ).split()
    return {f"S{i}": name for i, name in enumerate(names, 1)}


class GuardSettings(_Remote):
    """A guard model behind an OpenAI-compatible ``POST {base_url}/chat/completions``
    (Llama Guard and the like): it answers ``safe``, or ``unsafe`` and, on the next line,
    its category codes (``S1,S10``)."""

    model_config = {"extra": "forbid"}

    kind: Literal["guard"] = "guard"
    model: str = Field(min_length=1, description="The guard model's name at the server.")
    timeout_seconds: float = Field(default=5.0, gt=0, le=120)
    fail_mode: FailMode = FailMode.CLOSED
    categories: dict[str, str] = Field(
        default_factory=llama_guard_categories,
        description="The model's category codes and the names parley reports them by.",
    )
    max_tokens: int = Field(default=20, gt=0, le=256)


ClassifierSettings = Annotated[
    RulesSettings | EndpointSettings | GuardSettings, Field(discriminator="kind")
]


def default_classifiers() -> dict[str, ClassifierSettings]:
    return {"rules": RulesSettings()}


class SafetySettings(BaseModel):
    """``Settings.safety``: the classifiers by name, and how answers are checked."""

    model_config = {"extra": "forbid"}

    classifiers: dict[Annotated[str, Field(pattern=CATEGORY_NAME)], ClassifierSettings] = Field(
        default_factory=default_classifiers
    )
    window_tokens: int = Field(
        default=16,
        gt=0,
        le=1024,
        description="An answer goes to the endpoint and guard classifiers every this many "
        "tokens (each check with the window before it), and what is left at its end; the "
        "client sees each window once it is approved.",
    )

    def rules(self) -> RulesSettings:
        """The rule set ``parley engine serve`` answers ``/v1/moderations`` with: the one
        named ``rules`` if it is a rule set, else the built-in one."""
        configured = self.classifiers.get("rules")
        return configured if isinstance(configured, RulesSettings) else RulesSettings()


def check_tiers(safety: SafetySettings, tiers: Mapping[str, TierSettings]) -> None:
    """Every classifier a tier names is configured (ValueError naming it, at start-up)."""
    for name, tier in tiers.items():
        for stage, names in (("input", tier.moderation.input), ("output", tier.moderation.output)):
            for classifier in names:
                if classifier not in safety.classifiers:
                    raise ValueError(
                        f"tier {name!r}: moderation.{stage} names {classifier!r}, which is not "
                        f"one of safety.classifiers ({', '.join(sorted(safety.classifiers))})"
                    )
