"""``POST /v1/embeddings`` through parley to embedding servers, driven by the official
client: vectors as the server made them (float or base64, ``dimensions`` sent on), replicas
tried in turn when one fails, the caller's token budget charged what the server counted, and
what is not an embedding model, or not a field of OpenAI's, refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.fleet.conftest import FLEET_MODEL, Fleet
from tests.fleet.servers import Misbehaving
from tests.fleet.test_tools import program

EMBED = "embed-small"


def _model(*urls: str) -> list[dict[str, Any]]:
    return [{"name": EMBED, "upstream_model": "e5", "replicas": [{"base_url": u} for u in urls]}]


def _counted(server: Misbehaving) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{server.base}/count", timeout=5).json()
    return body


async def test_vectors_come_from_the_embedding_servers_in_either_encoding(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    chat, down, up = misbehaving("vllm-calls"), misbehaving("error500"), misbehaving("agent")
    embedding = _model(down.url, up.url)
    async with fleet([chat.url], embedding_models=embedding) as front, program(front) as client:
        ids = {m.id: m for m in (await client.models.list()).data}
        assert (ids[EMBED].model_extra or {})["task"] == "embedding"
        # the client asks for base64 by default and decodes it
        one = await client.embeddings.create(model=EMBED, input="hello world")
        two = await client.embeddings.create(
            model=EMBED, input=["hello world", "bye"], encoding_format="float", dimensions=6
        )
        tokens = await client.embeddings.create(model=EMBED, input=[[1, 2, 3]])
    assert one.model == EMBED and len(one.data) == 1 and len(one.data[0].embedding) == 4
    assert [len(d.embedding) for d in two.data] == [6, 6]
    assert two.data[0].embedding[:4] == pytest.approx(one.data[0].embedding, abs=1e-6)
    assert one.usage.prompt_tokens == 2 and two.usage.prompt_tokens == 3
    assert len(tokens.data) == 1
    sent = _counted(up)["embeddings_body"]
    assert sent["model"] == "e5"  # its upstream name
    assert _counted(down)["embeddings"] >= 1  # tried, failed, the next replica answered
    assert chat.requests() == 0


async def test_embeddings_are_charged_to_the_token_budget(
    fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    chat, up = misbehaving("vllm-calls"), misbehaving("agent")
    embedding = _model(up.url)
    async with fleet([chat.url], embedding_models=embedding) as front, program(front) as client:
        before = await client.embeddings.with_raw_response.create(model=EMBED, input="a")
        left = int(before.headers["x-ratelimit-remaining-tokens"])
        after = await client.embeddings.with_raw_response.create(
            model=EMBED, input=" ".join(["word"] * 50)
        )
    assert int(after.headers["x-ratelimit-remaining-tokens"]) == pytest.approx(left - 50, abs=2)


@pytest.mark.parametrize(
    ("fields", "status", "param"),
    [
        ({"model": FLEET_MODEL}, 400, "model"),  # a chat model
        ({"model": "nope"}, 404, None),
        ({"model": EMBED, "colour": "red"}, 400, "colour"),
        ({"model": EMBED, "input": ""}, 400, None),
        ({"model": EMBED, "input": ["x"] * 3}, 400, "input"),  # more than max_inputs
    ],
)
async def test_what_is_not_an_embedding_request_is_refused(
    fleet: Fleet,
    misbehaving: Callable[[str], Misbehaving],
    fields: dict[str, Any],
    status: int,
    param: str | None,
) -> None:
    chat, up = misbehaving("vllm-calls"), misbehaving("agent")
    model = [{**_model(up.url)[0], "max_inputs": 2}]
    async with fleet([chat.url], embedding_models=model) as front, program(front) as client:
        body = {"input": "hi", **fields}
        with pytest.raises(openai.APIStatusError) as refused:
            await client.embeddings.create(
                model=body.pop("model"), input=body.pop("input"), extra_body=body
            )
    assert refused.value.status_code == status
    if param is not None:
        assert refused.value.body["param"] == param  # type: ignore[index]
    assert _counted(up).get("embeddings", 0) == 0
