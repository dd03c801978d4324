"""Which engine serves which models, from the settings."""

from __future__ import annotations

from dataclasses import dataclass

from parley.config import EngineKind, ModelSettings, Settings
from parley.engines.fake import FAKE_MODEL, FakeEngine, FakeEngineConfig
from parley.engines.interface import Engine

DEFAULT_BUILTIN_MODEL = "SmolLM2-135M-Instruct"


def model_settings(settings: Settings) -> list[ModelSettings]:
    """The models served, the first the default: ``models``, or else the one of ``engine``."""
    if settings.models:
        return list(settings.models)
    if settings.engine is EngineKind.FAKE:
        return [ModelSettings(name=FAKE_MODEL, engine=EngineKind.FAKE)]
    return [ModelSettings(name=builtin_model_name(settings), engine=EngineKind.BUILTIN)]


def configured_models(settings: Settings) -> list[str]:
    """The model names clients may ask for; the first is the default."""
    return [m.name for m in model_settings(settings)]


def builtin_model_name(settings: Settings) -> str:
    """The built-in engine's model name, known without the model (an api process has none)."""
    for m in settings.models:
        if m.engine is EngineKind.BUILTIN:
            return m.name
    b = settings.builtin_engine
    if b.model_name:
        return b.model_name
    if b.model is None:
        return DEFAULT_BUILTIN_MODEL
    return b.model.stem if b.model.suffix.lower() == ".gguf" else b.model.name


def build_engine(settings: Settings) -> Engine:
    """The engine of every configured model: that model's own when there is one, else a
    catalog that hands each request to its model's engine."""
    engines = {m.name: _build(m, settings) for m in model_settings(settings)}
    if len(engines) == 1:
        return next(iter(engines.values()))
    from parley.engines.catalog import Catalog

    return Catalog(engines)


def _build(model: ModelSettings, settings: Settings) -> Engine:
    if model.engine is EngineKind.FAKE:
        return fake_engine(settings)
    if model.engine is EngineKind.OPENAI:
        from parley.engines.router import Router

        return Router(model.upstream_model or model.name, model.replicas, model.upstream)
    return builtin_engine(settings, name=model.name)


def fake_engine(settings: Settings) -> FakeEngine:
    f = settings.fake_engine
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


def builtin_engine(settings: Settings, *, name: str | None = None) -> Engine:
    import torch

    from parley.engines.builtin.engine import BuiltinEngine, BuiltinEngineConfig
    from parley.engines.builtin.loader import load_model
    from parley.engines.builtin.native.mode import NativeMode
    from parley.engines.builtin.precision import choose
    from parley.engines.builtin.threads import on_fresh_thread

    b = settings.builtin_engine
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
    loaded.name = name or builtin_model_name(settings)
    return BuiltinEngine(loaded, config)


@dataclass(frozen=True, slots=True)
class SlotOffer:
    """Slots a worker's engine offers for one model: its own (the built-in or fake engine:
    each worker's adds up), or a fleet's (every worker says the same; it counts once)."""

    model: str
    source: str
    slots: int


def slot_offers(settings: Settings, worker_id: str, concurrency: int) -> list[SlotOffer]:
    """What a worker running ``concurrency`` runs at once offers, model by model."""
    offers = []
    for model in model_settings(settings):
        shared = model.engine is EngineKind.OPENAI
        source = "fleet:" + ",".join(r.base_url for r in model.replicas) if shared else worker_id
        slots = _slots(model, settings)
        offers.append(SlotOffer(model.name, source, slots if shared else min(slots, concurrency)))
    return offers


def engine_slots(settings: Settings) -> int:
    """Requests the configured engines serve at once: the worker's default concurrency."""
    return sum(_slots(m, settings) for m in model_settings(settings))


def _slots(model: ModelSettings, settings: Settings) -> int:
    if model.engine is EngineKind.FAKE:
        return settings.fake_engine.slots
    if model.engine is EngineKind.OPENAI:
        return sum(r.slots for r in model.replicas)
    return settings.builtin_engine.max_running
