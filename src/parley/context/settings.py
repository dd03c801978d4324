"""The settings of context management (``Settings.context``), validated at start-up.

A chat's prompt is assembled under an input budget: the model's context window less the
run's output allowance, capped by the tier's ``max_input_tokens``. The fractions below are of
that budget, so one configuration fits models of any window.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, Field, model_validator

from parley.engines.settings import BearerKey


class EmbeddingsSettings(BearerKey):
    """An OpenAI-compatible embeddings endpoint (``POST {base_url}/embeddings``); when set,
    retrieval ranks a chat's older messages by embedding similarity, and falls back to
    full-text search whenever the endpoint fails."""

    model_config = {"extra": "forbid"}

    base_url: str = Field(
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="Up to and including /v1, e.g. http://gpu1:8000/v1.",
    )
    model: str = Field(min_length=1, max_length=200)
    timeout_seconds: float = Field(default=10, gt=0)
    max_batch: int = Field(default=64, gt=0, description="Inputs embedded in one request.")

    @model_validator(mode="after")
    def _key_present(self) -> EmbeddingsSettings:
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise ValueError(
                f"embeddings: the environment variable {self.api_key_env} named by "
                "api_key_env is not set"
            )
        return self


class ContextSettings(BaseModel):
    """How a chat's prompt is assembled, folded into a summary and completed by retrieval."""

    model_config = {"extra": "forbid"}

    enabled: bool = Field(
        default=True,
        description="False: every run sends the chat's whole history (its newest 200 "
        "messages), and a chat past the model's window fails with context_length_exceeded.",
    )
    system_prompt: str | None = Field(
        default=None,
        max_length=20_000,
        description="The system prompt of every model that sets none of its own.",
    )
    summary_trigger: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="Fold when the verbatim turns pass this fraction of the input budget …",
    )
    summary_trigger_tokens: int | None = Field(
        default=1536,
        gt=0,
        description="… or this many tokens, whichever is less (None: the fraction alone). "
        "Every turn prefills its new tokens against the whole verbatim part, so its time to "
        "first token and its cost grow with it: this keeps a long chat's turns as fast as "
        "its early ones, whatever the model's window.",
    )
    fold_fraction: float = Field(
        default=0.25,
        gt=0,
        lt=1,
        description="The oldest turns folded into the summary at once (a chunk), as a "
        "fraction of the input budget, at most half the trigger: larger folds change the "
        "prompt's prefix more rarely. A fold that finds more than a chunk past the trigger "
        "(the chat outran its folds) takes as many chunks as it needs.",
    )
    summary_max_tokens: int = Field(
        default=128,
        gt=0,
        description="The longest summary the model is asked to write: a fold's decode rides "
        "beside the users' runs, so a longer one lands later and the verbatim part grows "
        "meanwhile; the details are reached by retrieval.",
    )
    retrieval_snippets: int = Field(
        default=3, ge=0, description="Older messages retrieved into a prompt, at most."
    )
    retrieval_max_tokens: int = Field(
        default=256, ge=0, description="The part of the input budget retrieved snippets may use."
    )
    snippet_max_chars: int = Field(
        default=320,
        gt=0,
        description="A retrieved message longer than this is sent as its sentences that "
        "share most of the new message's words, within this many characters.",
    )
    retrieval_min_shared_words: int = Field(
        default=2,
        ge=1,
        description="A message full-text search found is kept only if it shares this many of "
        "the new message's words (all, if it has fewer): chance matches cost uncached tokens.",
    )
    retrieval_min_shared_fraction: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="… and at least this share of them: a short question about something "
        "said long ago shares its subject's two or three words with it (a fifth of what it "
        "asks, say); a long message shares a fifth of its many words only with one on the "
        "same subject, a few by chance.",
    )
    embeddings: EmbeddingsSettings | None = None

    @model_validator(mode="after")
    def _fold_below_trigger(self) -> ContextSettings:
        if self.fold_fraction > self.summary_trigger:
            raise ValueError(
                "context.fold_fraction must not exceed context.summary_trigger: a fold "
                "cannot take more turns than there are to fold"
            )
        return self
