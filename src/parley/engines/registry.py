"""Which engine serves which models, from the settings."""

from __future__ import annotations

from parley.config import EngineKind, Settings
from parley.engines.fake import FAKE_MODEL, FakeEngine, FakeEngineConfig
from parley.engines.interface import Engine


def configured_models(settings: Settings) -> list[str]:
    """The model names clients may ask for; the first is the default."""
    if settings.engine is EngineKind.FAKE:
        return [FAKE_MODEL]
    return [builtin_model_name(settings)]


DEFAULT_BUILTIN_MODEL = "SmolLM2-135M-Instruct"


def builtin_model_name(settings: Settings) -> str:
    """The built-in engine's model name, known without the model (an api process has none)."""
    b = settings.builtin_engine
    if b.model_name:
        return b.model_name
    if b.model is None:
        return DEFAULT_BUILTIN_MODEL
    return b.model.stem if b.model.suffix.lower() == ".gguf" else b.model.name


def build_engine(settings: Settings) -> Engine:
    if settings.engine is EngineKind.FAKE:
        f = settings.fake_engine
        return FakeEngine(
            FakeEngineConfig(
                time_to_first_token=f.time_to_first_token_ms / 1000,
                inter_token_latency=f.inter_token_latency_ms / 1000,
                output_tokens=f.output_tokens,
                slots=f.slots,
            )
        )
    return _builtin(settings)


def _builtin(settings: Settings) -> Engine:
    import torch

    from parley.engines.builtin.engine import BuiltinEngine, BuiltinEngineConfig
    from parley.engines.builtin.loader import load_model

    b = settings.builtin_engine
    dtype = torch.bfloat16 if b.dtype == "bfloat16" else torch.float32
    loaded = load_model(b.model, dtype=torch.float32)
    loaded.name = builtin_model_name(settings)
    return BuiltinEngine(
        loaded,
        BuiltinEngineConfig(
            kv_cache_tokens=b.kv_cache_tokens,
            block_size=b.block_size,
            max_batch_tokens=b.max_batch_tokens,
            max_running=b.max_running,
            dtype=dtype,
            device=b.device,
        ),
    )


def engine_slots(settings: Settings) -> int:
    if settings.engine is EngineKind.FAKE:
        return settings.fake_engine.slots
    return settings.builtin_engine.max_running
