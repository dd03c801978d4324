"""How an answer is sampled: one type for every path.

Each wire request maps to it in one place (``openai.protocol.ChatCompletionRequest.
sampling_params`` for ``/v1`` and ``parley engine serve``; ``MessageCreate.sampling_params``
for a chat's send), a run stores it whole (``runs.sampling``, one JSON column), and every
engine reads it from ``GenerationRequest.sampling``: the built-in engine resolves it into a
sequence's ``SequenceSampling``, an upstream sends what is set. Adding a parameter touches
its wire type, its mapping, this type, and the engines that honour it.

``max_tokens`` is not here: it is the run's cost, admitted and charged, and has a column.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class SamplingParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: Annotated[float, Field(ge=0, le=2)] | None = Field(
        None, description="None: the engine's default."
    )
    top_p: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="None: no nucleus cut (1)."
    )
    seed: int | None = Field(None, description="Sampling made repeatable by this seed.")
    stop: tuple[str, ...] = Field((), description="Strings that end the answer (not kept).")

    def to_json(self) -> str:
        """As a run stores it: only what is set."""
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_json(cls, text: str | None) -> SamplingParams:
        return cls() if not text else cls.model_validate_json(text)


GREEDY = SamplingParams(temperature=0.0)
