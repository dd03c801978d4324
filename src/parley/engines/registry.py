"""Which engines serve which models, from the engines section: each model's kind is looked
up in ``engines/kinds.py``'s table, never branched on here."""

from __future__ import annotations

from dataclasses import dataclass

from parley.engines.interface import Engine
from parley.engines.kinds import Capabilities, described
from parley.engines.prompt_counts import BuiltinFiles
from parley.engines.settings import EngineSettings, ModelSettings


def model_settings(engines: EngineSettings) -> list[ModelSettings]:
    """The models served, the first the default: ``models``, or else the one of ``kind``."""
    if engines.models:
        return list(engines.models)
    default = described(engines.kind).default_model
    assert default is not None, "the settings refuse a kind without a default model"
    return [default(engines)]


def capabilities(engines: EngineSettings) -> dict[str, Capabilities]:
    """What each served model's engine can do, by model name."""
    return {m.name: described(m.engine).capabilities for m in model_settings(engines)}


def configured_models(engines: EngineSettings) -> list[str]:
    """The model names clients may ask for; the first is the default."""
    return [m.name for m in model_settings(engines)]


def build_engine(engines: EngineSettings, files: BuiltinFiles | None = None) -> Engine:
    """The engine of every configured model: that model's own when there is one, else a
    catalog that hands each request to its model's engine. ``files`` learns the built-in
    model's tokenizer and window, if this process loads it (to count prompts with it)."""
    files = files or BuiltinFiles(engines.builtin.model)
    built = {m.name: described(m.engine).build(m, engines, files) for m in model_settings(engines)}
    if len(built) == 1:
        return next(iter(built.values()))
    from parley.engines.catalog import Catalog

    return Catalog(built)


@dataclass(frozen=True, slots=True)
class CapacityOffer:
    """Run slots a worker's engine offers for one model: its own (an engine in the process:
    each worker's adds up), or a fleet's (every worker says the same; it counts once)."""

    model: str
    source: str
    slots: int


def capacity_offers(
    engines: EngineSettings, worker_id: str, concurrency: int
) -> list[CapacityOffer]:
    """What a worker running ``concurrency`` runs at once offers, model by model."""
    offers = []
    for model in model_settings(engines):
        kind = described(model.engine)
        slots = kind.slots(model, engines)
        if kind.fleet:
            source = "fleet:" + ",".join(r.base_url for r in model.replicas)
            offers.append(CapacityOffer(model.name, source, slots))
        else:
            offers.append(CapacityOffer(model.name, worker_id, min(slots, concurrency)))
    return offers


def engine_capacity(engines: EngineSettings) -> int:
    """Requests the configured engines serve at once: the worker's default concurrency."""
    return sum(described(m.engine).slots(m, engines) for m in model_settings(engines))
