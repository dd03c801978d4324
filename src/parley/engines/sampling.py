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
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = Field(
        None, description="Less likely the more often a token was said already (OpenAI's)."
    )
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = Field(
        None, description="Less likely once a token was said at all (OpenAI's)."
    )
    logit_bias: dict[int, Annotated[float, Field(ge=-100, le=100)]] | None = Field(
        None, max_length=300, description="Added to the logits of these token ids."
    )
    top_k: Annotated[int, Field(ge=1)] | None = Field(
        None, description="Only the k likeliest tokens (vLLM's, llama.cpp's)."
    )
    min_p: Annotated[float, Field(ge=0, le=1)] | None = Field(
        None, description="Only tokens at least this fraction as likely as the likeliest."
    )
    logprobs: bool | None = Field(
        None, description="Each output token's log probability comes with it (OpenAI's)."
    )
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = Field(
        None, description="And that many likeliest tokens at its place, with theirs."
    )

    @property
    def logprob_count(self) -> int | None:
        """None: no log probabilities asked; else how many alternatives a token comes with."""
        return (self.top_logprobs or 0) if self.logprobs else None

    def to_json(self) -> str:
        """As a run stores it: only what is set."""
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_json(cls, text: str | None) -> SamplingParams:
        return cls() if not text else cls.model_validate_json(text)


GREEDY = SamplingParams(temperature=0.0)

# what every engine honours; an engine kind declares the rest it honours (``engines/kinds.py``)
BASIC: frozenset[str] = frozenset({"temperature", "top_p", "seed", "stop"})
EVERY: frozenset[str] = frozenset(SamplingParams.model_fields)


def set_fields(params: SamplingParams) -> list[str]:
    """The parameters a request set (to something other than "not set")."""
    fields = SamplingParams.model_fields.items()
    return [name for name, field in fields if getattr(params, name) != field.default]
