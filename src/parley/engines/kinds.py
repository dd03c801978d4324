"""Engine kinds in one table: per kind, how its engine is built, how many requests it serves
at once, how its prompts are counted and how long a prompt it reads, and what it can do.

``registry.py`` (which engines serve which models), ``qos/prompt_counter.py`` (a run's
reservation), the CLI (``parley engine serve``) and the composition root read this table;
none of them names a kind. A new kind is an ``EngineKind``, its engine module, and one
``EngineDescriptor`` here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from parley.engines.fake import FAKE_MODEL
from parley.engines.prompt_counts import (
    DEFAULT_UPSTREAM_WINDOW,
    ESTIMATE,
    BuiltinFiles,
    PromptCount,
    WordCount,
    file_tokenizer_count,
)
from parley.engines.sampling import BASIC, EVERY, SamplingParams, set_fields
from parley.engines.settings import EngineKind, EngineSettings, ModelSettings
from parley.engines.tools import OutputSpec

if TYPE_CHECKING:
    from parley.engines.fake import FakeEngine
    from parley.engines.interface import Engine

DEFAULT_BUILTIN_MODEL = "SmolLM2-135M-Instruct"


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a kind's engines can do beyond plain text; a request that needs more is refused
    naming what it asked for."""

    tools: bool = False
    structured_output: bool = False
    reasoning: bool = False
    vision: bool = False
    # the sampling parameters it honours (``engines/sampling.SamplingParams``' field names)
    sampling: frozenset[str] = BASIC

    @property
    def logprobs(self) -> bool:
        """Whether it gives the answer's log probabilities (a sampling parameter)."""
        return "logprobs" in self.sampling


def unable(
    can: Capabilities, sampling: SamplingParams, output: OutputSpec, *, calls: bool
) -> str | None:
    """The first parameter a request sets that an engine able to do ``can`` cannot honour
    (``calls``: its conversation holds tool calls or results); None if it can do them all."""
    for name in set_fields(sampling):
        if name not in can.sampling:
            return name
    asked = [
        ("tools", output.tools is not None or calls, can.tools),
        ("response_format", output.response_format is not None, can.structured_output),
        ("reasoning_effort", output.reasoning_effort is not None, can.reasoning),
    ]
    return next((param for param, wanted, able in asked if wanted and not able), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineDescriptor:
    kind: EngineKind
    summary: str
    capabilities: Capabilities
    # runs inside a parley process (a worker, `parley engine serve`): at most one model of it
    in_process: bool
    # its slots are a shared fleet's: every worker offers the same ones (counted once)
    fleet: bool
    # the one model served when `engine` is this kind and no `models` are configured
    default_model: Callable[[EngineSettings], ModelSettings] | None
    # the engine; one that read the built-in model's files tells ``BuiltinFiles``
    build: Callable[[ModelSettings, EngineSettings, BuiltinFiles], Engine]
    slots: Callable[[ModelSettings, EngineSettings], int]
    # None: the prompt is estimated
    prompt_count: Callable[[ModelSettings, BuiltinFiles], PromptCount | None]
    # how its engine counts a prompt (what a worker stores), given ``prompt_count``'s; None:
    # not known without the engine
    engine_count: Callable[[PromptCount | None], PromptCount | None]
    window: Callable[[ModelSettings, EngineSettings, BuiltinFiles], int]


# -- the built-in engine -------------------------------------------------------------------


def builtin_model_name(engines: EngineSettings) -> str:
    """The built-in engine's model name, known without the model (an api process has none)."""
    for m in engines.models:
        if m.engine is EngineKind.BUILTIN:
            return m.name
    b = engines.builtin
    if b.model_name:
        return b.model_name
    if b.model is None:
        return DEFAULT_BUILTIN_MODEL
    return b.model.stem if b.model.suffix.lower() == ".gguf" else b.model.name


def builtin_engine(
    engines: EngineSettings, *, name: str | None = None, files: BuiltinFiles | None = None
) -> Engine:
    import torch

    from parley.engines.builtin.engine import BuiltinEngine, BuiltinEngineConfig
    from parley.engines.builtin.loader import load_model
    from parley.engines.builtin.native.mode import NativeMode
    from parley.engines.builtin.precision import choose
    from parley.engines.builtin.threads import on_fresh_thread

    b = engines.builtin
    device = torch.device(b.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    config = BuiltinEngineConfig(
        kv_cache_tokens=b.kv_cache_tokens,
        block_size=b.block_size,
        max_batch_tokens=b.max_batch_tokens,
        max_running=b.max_running,
        precision=choose(b.precision, device),
        device=device.type,
        packed_weights=b.packed_weights,
        native_decode=NativeMode(b.native_decode),
    )
    # loading (a GGUF is dequantized the first time) runs off this thread too: threads.py
    loaded = on_fresh_thread(lambda: load_model(b.model, dtype=torch.float32))
    loaded.name = name or builtin_model_name(engines)
    engine = BuiltinEngine(loaded, config)
    if files is not None:
        files.given(engine.tokenizer, engine.context_window)
    return engine


BUILTIN = EngineDescriptor(
    kind=EngineKind.BUILTIN,
    summary="parley's own engine: continuous batching, paged KV cache, prefix caching",
    # decodes under a JSON schema (builtin/grammar.py); calls tools in a fixed format under
    # a grammar (builtin/calling.py)
    capabilities=Capabilities(tools=True, structured_output=True, sampling=EVERY),
    in_process=True,
    fleet=False,
    default_model=lambda e: ModelSettings(name=builtin_model_name(e), engine=EngineKind.BUILTIN),
    build=lambda model, e, files: builtin_engine(e, name=model.name, files=files),
    slots=lambda model, e: e.builtin.max_running,
    prompt_count=lambda model, files: files.count(),
    engine_count=lambda count: count,  # the same tokenizer and template
    window=lambda model, e, files: files.load().window,
)


# -- the fake engine -------------------------------------------------------------------------


def fake_engine(engines: EngineSettings) -> FakeEngine:
    from parley.engines.fake import FakeEngine, FakeEngineConfig

    f = engines.fake
    return FakeEngine(
        FakeEngineConfig(
            time_to_first_token=f.time_to_first_token_ms / 1000,
            inter_token_latency=f.inter_token_latency_ms / 1000,
            output_tokens=f.output_tokens,
            slots=f.slots,
            context_window=f.context_window,
            answers=tuple(f.answers.items()),
            answer=f.answer,
        )
    )


FAKE = EngineDescriptor(
    kind=EngineKind.FAKE,
    summary="scripted answers at a set pace (tests and load benchmarks)",
    capabilities=Capabilities(),
    in_process=True,
    fleet=False,
    default_model=lambda e: ModelSettings(name=FAKE_MODEL, engine=EngineKind.FAKE),
    build=lambda model, e, files: fake_engine(e),
    slots=lambda model, e: e.fake.slots,
    prompt_count=lambda model, files: WordCount(),
    engine_count=lambda count: count,
    window=lambda model, e, files: e.fake.context_window,
)


# -- a fleet of OpenAI-compatible servers ------------------------------------------------------


def upstream_router(model: ModelSettings) -> Engine:
    from parley.engines.router import Router

    return Router(model.upstream_model or model.name, model.replicas, model.upstream)


OPENAI = EngineDescriptor(
    kind=EngineKind.OPENAI,
    summary="a fleet of OpenAI-compatible servers (vLLM, SGLang, llama.cpp, Ollama, hosted)",
    # sent on as given (the server decides): sampling, tools; its reasoning is streamed
    capabilities=Capabilities(tools=True, structured_output=True, reasoning=True, sampling=EVERY),
    in_process=False,
    fleet=True,
    default_model=None,
    build=lambda model, e, files: upstream_router(model),
    slots=lambda model, e: sum(r.slots for r in model.replicas),
    prompt_count=lambda model, files: file_tokenizer_count(model),
    engine_count=lambda count: ESTIMATE,  # until the server's usage says (a configured
    # tokenizer counts the reservation only)
    window=lambda model, e, files: model.context_window or DEFAULT_UPSTREAM_WINDOW,
)


KINDS: Mapping[EngineKind, EngineDescriptor] = {d.kind: d for d in (BUILTIN, FAKE, OPENAI)}


def described(kind: EngineKind) -> EngineDescriptor:
    return KINDS[kind]
