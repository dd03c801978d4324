"""The built-in engine decoding under a JSON schema (``builtin/grammar.py``): greedy answers
of the tiny random model follow their schema every time, a batch mixes constrained and free
sequences (a free answer is the one it gives alone), and a schema the grammar library
cannot take is refused before the sequence is queued."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from parley.engines.builtin.engine import BuiltinEngine, BuiltinEngineConfig
from parley.engines.builtin.loader import load_model
from parley.engines.interface import ChatMessage, EngineRefusedRequest, GenerationRequest
from parley.engines.sampling import GREEDY, SamplingParams
from parley.engines.tools import OutputSpec, ResponseFormat
from tests.engines.tiny import save_tiny_chat_model

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 5},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        },
        "required": ["name", "tags"],
        "additionalProperties": False,
    },
    {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[BuiltinEngine]:
    config = BuiltinEngineConfig(kv_cache_tokens=8192, max_running=8)
    e = BuiltinEngine(load_model(save_tiny_chat_model(tmp_path / "tiny")), config)
    await e.start()
    yield e
    await e.close()


def asking(
    run_id: str, text: str, schema: dict[str, Any] | None, **sampling: Any
) -> GenerationRequest:
    fmt = None
    if schema is not None:
        fmt = ResponseFormat.model_validate(
            {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
        )
    return GenerationRequest(
        request_id=run_id,
        model="tiny",
        messages=[ChatMessage("user", text)],
        max_tokens=300,
        sampling=SamplingParams(**sampling) if sampling else GREEDY,
        output=OutputSpec(response_format=fmt),
    )


async def text(engine: BuiltinEngine, request: GenerationRequest) -> str:
    return "".join([d.text async for d in engine.stream(request)])


@pytest.mark.parametrize("schema", SCHEMAS, ids=["bool", "object", "array"])
@pytest.mark.parametrize("prompt", ["hello", "tell me about cats", "{{{"])
async def test_greedy_answers_follow_their_schema(
    engine: BuiltinEngine, schema: dict[str, Any], prompt: str
) -> None:
    import jsonschema

    answer = json.loads(await text(engine, asking("r", prompt, schema)))
    jsonschema.validate(answer, schema)


@pytest.mark.parametrize("schema", SCHEMAS[1:], ids=["object", "integers"])
async def test_sampled_answers_follow_their_schema_too(
    engine: BuiltinEngine, schema: dict[str, Any]
) -> None:
    """Sampled, the tiny model would write an integer's digits until its tokens ran out:
    integers the schema leaves unbounded are kept within JSON's portable range."""
    import jsonschema

    for seed in range(6):
        request = asking(f"r{seed}", "hi", schema, temperature=1.5, seed=seed)
        jsonschema.validate(json.loads(await text(engine, request)), schema)


async def test_a_batch_mixes_constrained_and_free_sequences(engine: BuiltinEngine) -> None:
    alone = await text(engine, asking("free-alone", "hello there", None))
    together = await asyncio.gather(
        text(engine, asking("c1", "hello there", SCHEMAS[0])),
        text(engine, asking("free", "hello there", None)),
        text(engine, asking("c2", "hello there", SCHEMAS[2])),
    )
    assert together[1] == alone  # the free row was not masked
    assert json.loads(together[0])["ok"] in (True, False)
    assert isinstance(json.loads(together[2]), list)


async def test_a_schema_the_grammar_cannot_take_is_refused(engine: BuiltinEngine) -> None:
    bad = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}
    with pytest.raises(EngineRefusedRequest, match="response_format"):
        await text(engine, asking("bad", "hi", bad))
