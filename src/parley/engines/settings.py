"""The engines' settings: which engine serves a model, the built-in and fake engines' sizes,
and an OpenAI-compatible fleet's replicas, timeouts and routing. Part of ``parley.config``'s
``Settings`` (validated there, at start-up)."""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator


class EngineKind(StrEnum):
    BUILTIN = "builtin"
    FAKE = "fake"
    OPENAI = "openai"  # OpenAI-compatible servers (vLLM, SGLang, llama.cpp, Ollama, hosted)


class BuiltinEngineSettings(BaseModel):
    """The built-in engine: which model, how much KV cache, how big a step."""

    model_config = {"extra": "forbid"}

    model: Path | None = Field(
        default=None,
        description="A .gguf file or a Hugging Face safetensors folder; default: SmolLM2-135M.",
    )
    model_name: str | None = Field(default=None, description="Name clients use; default: file's.")
    kv_cache_tokens: int = Field(
        default=32_768, gt=0, description="Tokens the paged KV cache holds, all sequences together."
    )
    block_size: int = Field(default=16, gt=0, description="Tokens in one KV cache block.")
    max_batch_tokens: int = Field(
        default=512, gt=0, description="Tokens one engine step computes at most (prefill chunks)."
    )
    max_running: int = Field(
        default=64, gt=0, description="Sequences generated at once: the engine's slots."
    )
    precision: Literal["auto", "fp32", "bf16", "int8", "int4", "w8a8"] = Field(
        default="auto",
        description="The weights: fp32, bf16, int8 or int4 (weight-only; activations and KV "
        "cache stay float32); auto: fp32 on a CPU, bf16 on a GPU.",
    )
    device: str | None = Field(default=None, description="cpu or cuda; default: cuda if present.")
    packed_weights: bool = Field(
        default=True,
        description="fp32/bf16 matrices reordered once for oneDNN's products on a CPU (about "
        "2x the plain products); false: PyTorch's plain F.linear.",
    )
    native_decode: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Decode steps (fp32, int8, int4 on a CPU) as one call of a C function "
        "compiled for this CPU at the first start (needs a C compiler with OpenMP): auto uses "
        "it where it can be built, on refuses to start without it, off never uses it.",
    )

    @model_validator(mode="before")
    @classmethod
    def _dtype_is_precision(cls, data: object) -> object:
        """The former ``dtype`` setting (float32/bfloat16) still reads, as its precision."""
        if isinstance(data, dict) and "dtype" in data:
            data = dict(data)
            old = data.pop("dtype")
            names = {"float32": "fp32", "bfloat16": "bf16"}
            if old not in names:
                raise ValueError(f"dtype must be float32 or bfloat16 (now: precision), not {old!r}")
            data.setdefault("precision", names[old])
        return data


class FakeEngineSettings(BaseModel):
    """The fake engine's pace and size (tests and load benchmarks)."""

    model_config = {"extra": "forbid"}

    time_to_first_token_ms: float = Field(
        default=50, ge=0, description="Wait before the first token."
    )
    inter_token_latency_ms: float = Field(default=20, ge=0, description="Wait between tokens.")
    output_tokens: int = Field(default=32, ge=0, description="Tokens an unscripted answer has.")
    slots: int = Field(default=8, gt=0, description="Answers generated at once.")
    context_window: int = Field(default=8_192, gt=0, description="Tokens it reads (fake).")
    answers: dict[str, str] = Field(
        default_factory=dict,
        description="Scripted answers: a regular expression searched in the newest message, "
        "and the answer when it matches (the first that does).",
    )
    answer: str | None = Field(
        default=None, description="The answer when none of `answers` matches; default: words."
    )

    @field_validator("answers")
    @classmethod
    def _patterns_compile(cls, answers: dict[str, str]) -> dict[str, str]:
        for pattern in answers:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"answers: {pattern!r} does not compile: {e}") from e
        return answers


class ReplicaSettings(BaseModel):
    """One OpenAI-compatible server of a model's fleet."""

    model_config = {"extra": "forbid"}

    base_url: str = Field(
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="Up to and including /v1, e.g. http://gpu1:8000/v1.",
    )
    slots: int = Field(default=16, gt=0, description="Requests it serves at once.")
    weight: float = Field(default=1.0, gt=0, description="Its share of the chats, relative.")
    name: str | None = Field(default=None, description="For logs and metrics; default: host:port.")

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        rest = self.base_url.split("://", 1)[1]
        return rest.split("/", 1)[0]


class BearerKey(BaseModel):
    """An API key sent as a Bearer token: given, or read from an environment variable."""

    api_key: SecretStr | None = Field(default=None, description="Sent as a Bearer token.")
    api_key_env: str | None = Field(
        default=None, description="The environment variable that holds the API key instead."
    )

    def resolved_api_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env:
            return os.environ.get(self.api_key_env) or None
        return None


class UpstreamSettings(BearerKey):
    """How parley talks to a model's OpenAI-compatible servers, and routes among them."""

    model_config = {"extra": "forbid"}

    connect_timeout_seconds: float = Field(default=5, gt=0)
    first_token_timeout_seconds: float = Field(
        default=120, gt=0, description="From the request to its first token (queue + prefill)."
    )
    idle_timeout_seconds: float = Field(
        default=60, gt=0, description="The longest silence between two chunks of an answer."
    )
    balance_factor: float = Field(
        default=1.25,
        ge=1.0,
        description="Bounded load: a replica above this times the average in-flight passes "
        "new chats along the ring.",
    )
    virtual_nodes: int = Field(default=64, gt=0, description="Ring points per unit of weight.")
    max_attempts: int = Field(default=3, gt=0, description="Replicas tried before first token.")
    failure_threshold: int = Field(
        default=3, gt=0, description="Consecutive failures (requests or probes) that remove it."
    )
    recovery_probes: int = Field(
        default=2, gt=0, description="Consecutive good probes that bring a replica back."
    )
    probe_interval_seconds: float = Field(default=5, gt=0)
    probe_path: str = Field(default="/models", pattern=r"^/", description="Under base_url.")


class ModelSettings(BaseModel):
    """A model clients may ask for, and the engine that serves it."""

    model_config = {"extra": "forbid"}

    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\s/][^\s]*$")
    engine: EngineKind
    upstream_model: str | None = Field(
        default=None, description="The name sent upstream (openai); default: name."
    )
    replicas: list[ReplicaSettings] = Field(default_factory=list)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    tokenizer: Path | None = Field(
        default=None,
        description="A tokenizer.json file or a Hugging Face folder holding one, to count "
        "prompts in the api process (openai); default: a conservative estimate.",
    )
    context_window: int | None = Field(
        default=None,
        gt=0,
        description="The tokens the model reads, prompt and answer (openai; default "
        "8192); the built-in engine's comes from its model.",
    )
    system_prompt: str | None = Field(
        default=None, max_length=20_000, description="Default: context.system_prompt."
    )

    @model_validator(mode="after")
    def _tokenizer_file(self) -> ModelSettings:
        """Checked here, not when the first message is counted: a wrong path is a
        configuration error, not a silently low budget reservation."""
        if self.tokenizer is None:
            return self
        if self.engine is not EngineKind.OPENAI:
            raise ValueError(
                f"model {self.name!r}: only an openai engine takes a tokenizer "
                "(the built-in engine counts with its model's own)"
            )
        self.tokenizer = self.tokenizer.expanduser()
        if tokenizer_json(self.tokenizer) is None:
            raise ValueError(
                f"model {self.name!r}: tokenizer {str(self.tokenizer)!r} is neither a "
                "tokenizer.json file nor a folder holding one"
            )
        return self

    @model_validator(mode="after")
    def _window_for_openai(self) -> ModelSettings:
        if self.context_window is not None and self.engine is not EngineKind.OPENAI:
            raise ValueError(
                f"model {self.name!r}: only an openai engine takes a context_window (the "
                "built-in engine reads its model's, the fake engine's is fake_engine's)"
            )
        return self

    @model_validator(mode="after")
    def _replicas_for_openai(self) -> ModelSettings:
        if self.engine is EngineKind.OPENAI and not self.replicas:
            raise ValueError(f"model {self.name!r}: an openai engine needs at least one replica")
        if self.engine is not EngineKind.OPENAI and self.replicas:
            raise ValueError(f"model {self.name!r}: only an openai engine has replicas")
        urls = [r.base_url.rstrip("/") for r in self.replicas]
        if len(set(urls)) != len(urls):
            raise ValueError(f"model {self.name!r}: a replica is listed twice")
        if self.upstream.api_key_env and not os.environ.get(self.upstream.api_key_env):
            raise ValueError(
                f"model {self.name!r}: the environment variable {self.upstream.api_key_env} "
                "named by api_key_env is not set"
            )
        return self


class EmbeddingModelSettings(BearerKey):
    """A model that turns text into vectors (``POST /v1/embeddings``), served by a fleet of
    OpenAI-compatible servers (vLLM, llama.cpp, Ollama, TEI, hosted)."""

    model_config = {"extra": "forbid"}

    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\s/][^\s]*$")
    upstream_model: str | None = Field(
        default=None, description="The name sent upstream; default: name."
    )
    replicas: list[ReplicaSettings] = Field(min_length=1)
    timeout_seconds: float = Field(default=30, gt=0, description="For one request, whole.")
    max_inputs: int = Field(default=2048, gt=0, description="Texts in one request, at most.")


class EngineSettings(BaseModel):
    """The engines section (``[engines]``, ``PARLEY_ENGINES__…``; the former flat names
    ``engine``, ``models``, ``builtin_engine`` and ``fake_engine`` still read): the models
    served and the engines that serve them."""

    model_config = {"extra": "forbid"}

    kind: EngineKind = Field(
        default=EngineKind.BUILTIN,
        description="The one model's engine when `models` is empty (builtin or fake).",
    )
    models: list[ModelSettings] = Field(
        default_factory=list,
        description="The models served, the first the default; empty: one, of `kind`.",
    )
    embedding_models: list[EmbeddingModelSettings] = Field(
        default_factory=list, description="Models served at /v1/embeddings."
    )
    builtin: BuiltinEngineSettings = Field(default_factory=BuiltinEngineSettings)
    fake: FakeEngineSettings = Field(default_factory=FakeEngineSettings)

    @model_validator(mode="after")
    def _models(self) -> EngineSettings:
        if not self.models and self.kind is EngineKind.OPENAI:
            raise ValueError("engine openai needs its replicas: configure it under `models`")
        names = [m.name for m in self.models] + [m.name for m in self.embedding_models]
        if len(set(names)) != len(names):
            raise ValueError("two models have one name")
        for kind in (EngineKind.BUILTIN, EngineKind.FAKE):  # each runs in the process
            if sum(m.engine is kind for m in self.models) > 1:
                raise ValueError(f"at most one model may use the {kind.value} engine")
        return self


def tokenizer_json(path: Path) -> Path | None:
    """The tokenizer.json file ``path`` names (itself, or the one in that folder), if any."""
    file = path / "tokenizer.json" if path.is_dir() else path
    return file if file.is_file() and file.name == "tokenizer.json" else None
