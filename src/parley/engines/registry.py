"""Which engine serves which models, from the settings."""

from __future__ import annotations

from parley.config import EngineKind, Settings
from parley.engines.fake import FAKE_MODEL, FakeEngine, FakeEngineConfig
from parley.engines.interface import Engine


def configured_models(settings: Settings) -> list[str]:
    """The model names clients may ask for; the first is the default."""
    if settings.engine is EngineKind.FAKE:
        return [FAKE_MODEL]
    raise AssertionError(settings.engine)


def build_engine(settings: Settings) -> Engine:
    if settings.engine is EngineKind.FAKE:
        f = settings.fake_engine
        return FakeEngine(
            FakeEngineConfig(
                time_to_first_token=f.time_to_first_token_ms / 1000,
                inter_token_latency=f.inter_token_latency_ms / 1000,
                output_tokens=f.output_tokens,
                slots=f.slots,
                models=tuple(configured_models(settings)),
            )
        )
    raise AssertionError(settings.engine)


def engine_slots(settings: Settings) -> int:
    if settings.engine is EngineKind.FAKE:
        return settings.fake_engine.slots
    raise AssertionError(settings.engine)
