"""The QoS section (``[qos]``, ``PARLEY_QOS__…``; the former flat names ``tiers``,
``default_tier``, ``default_max_tokens``, ``queue_max`` and ``load_window_seconds`` still
read): the service tiers, and how admission queues and sheds runs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from parley.tiers import TierSettings, default_tiers

REQUIRED = {n for n, f in TierSettings.model_fields.items() if f.is_required()}


class QosSettings(BaseModel):
    model_config = {"extra": "forbid"}

    tiers: dict[str, TierSettings] = Field(
        default_factory=default_tiers, description="The service tiers, by name."
    )
    default_tier: str = Field(default="free", description="A new user's tier.")
    default_max_tokens: int = Field(
        default=512, gt=0, description="A run's output allowance when it names none."
    )
    queue_max: int = Field(default=1000, gt=0, description="Runs queued at once, all models.")
    load_window_seconds: float = Field(
        default=30, gt=0, le=300, description="How far back a model's drain rate looks."
    )

    @field_validator("tiers", mode="before")
    @classmethod
    def _over_defaults(cls, given: Any) -> Any:
        """A default tier named with only some fields (``PARLEY_TIERS__FREE__BURST_TOKENS=
        5000``) takes the rest from that default; when every tier given is such a change, the
        other default tiers stay. A tier given whole is taken as given."""
        if not isinstance(given, dict) or not given:
            return given
        defaults = {n: t.model_dump() for n, t in default_tiers().items()}
        changes = {
            name: {**defaults[name], **tier}
            for name, tier in given.items()
            if isinstance(tier, dict) and name in defaults and not set(tier) >= REQUIRED
        }
        merged = {**given, **changes}
        return {**defaults, **merged} if len(changes) == len(given) else merged

    @model_validator(mode="after")
    def _tiers(self) -> QosSettings:
        if not self.tiers:
            raise ValueError("at least one tier must be configured")
        if self.default_tier not in self.tiers:
            raise ValueError(
                f"default_tier {self.default_tier!r} is not one of the tiers {sorted(self.tiers)}"
            )
        return self

    @property
    def top_priority(self) -> int:
        """The highest tier's priority: its runs alone may take a worker's reserved slots."""
        return max(t.priority for t in self.tiers.values())

    def tier(self, name: str) -> TierSettings:
        """A tier's settings; a user on a tier no longer configured gets the default tier's."""
        return self.tiers.get(name) or self.tiers[self.default_tier]

    def default_output(self, tier: TierSettings) -> int:
        """A run's output allowance when it names none: ``default_max_tokens``, within the
        tier's ``max_output_tokens``."""
        return min(self.default_max_tokens, tier.max_output_tokens)
