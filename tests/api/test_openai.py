"""OpenAI's API for programs, driven by the official ``openai`` package, unchanged, against a
live parley (a real uvicorn server with its worker) on both stacks: SQLite with the
in-process bus, and Postgres with Redis."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionUserMessageParam,
)
from sqlalchemy import event

from parley.api.app import create_app
from parley.config import Settings
from parley.connections import bus_limits
from parley.engines.fake import FAKE_MODEL, FakeEngine
from parley.engines.interface import ChatMessage
from parley.services import Services
from tests.builders import make_bus, served, services_for
from tests.helpers import bearer, new_api_key
from tests.runs.helpers import wait_run
from tests.waiting import eventually

RATE_HEADERS = ("x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens")
SYSTEM: ChatCompletionSystemMessageParam = {"role": "system", "content": "You are terse."}
HELLO: ChatCompletionUserMessageParam = {"role": "user", "content": "Say hello"}


@pytest.fixture
async def api_key(run_client: httpx.AsyncClient) -> str:
    return await new_api_key(run_client, "prog@example.com")


@pytest.fixture
async def oai(run_client: httpx.AsyncClient, api_key: str) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(
        base_url=_v1(run_client), api_key=api_key, max_retries=0, timeout=30
    )
    yield client
    await client.close()


def _v1(client: httpx.AsyncClient) -> str:
    return f"{str(client.base_url).rstrip('/')}/v1"


def _run_id(completion_id: str) -> str:
    assert completion_id.startswith("chatcmpl-run_")
    return completion_id.removeprefix("chatcmpl-")


async def test_lists_the_models(oai: openai.AsyncOpenAI) -> None:
    page = await oai.models.list()
    assert [m.id for m in page.data] == [FAKE_MODEL]
    assert page.data[0].object == "model"
    said = page.data[0].model_extra or {}
    assert said["capabilities"] == {
        "tools": False,
        "structured_output": False,
        "reasoning": False,
        "vision": False,
        "logprobs": False,
    }
    assert said["context_window"] == 8192  # the fake engine's


async def test_one_model_is_retrieved_and_another_is_404(oai: openai.AsyncOpenAI) -> None:
    model = await oai.models.retrieve(FAKE_MODEL)
    assert model.id == FAKE_MODEL and (model.model_extra or {})["context_window"] == 8192
    with pytest.raises(openai.NotFoundError):
        await oai.models.retrieve("nope")


async def test_a_whole_completion_is_a_run_without_a_chat(
    oai: openai.AsyncOpenAI, run_client: httpx.AsyncClient, api_key: str
) -> None:
    done = await oai.chat.completions.create(model=FAKE_MODEL, messages=[SYSTEM, HELLO])
    choice = done.choices[0]
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "stop"
    assert choice.message.content is not None
    assert len(choice.message.content.split()) == 24  # the fake engine's answer, whole
    assert done.usage is not None and done.usage.completion_tokens == 24
    assert done.usage.prompt_tokens == (3 + 4) + (2 + 4)  # the fake engine: words + 4 each
    assert done.usage.total_tokens == done.usage.prompt_tokens + 24
    run = (await run_client.get(f"/api/runs/{_run_id(done.id)}", headers=bearer(api_key))).json()
    assert run["source"] == "api"
    assert run["status"] == "completed"
    assert run["chat_id"] is None and run["message_id"] is None
    assert run["content"] == choice.message.content
    chats = (await run_client.get("/api/chats", headers=bearer(api_key))).json()
    assert chats["data"] == []


async def test_a_streamed_completion_with_usage(
    oai: openai.AsyncOpenAI, run_services: Services
) -> None:
    whole = await oai.chat.completions.create(model=FAKE_MODEL, messages=[SYSTEM, HELLO])
    stream = await oai.chat.completions.create(
        model=FAKE_MODEL,
        messages=[SYSTEM, HELLO],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta]
    texts = [t for t in content if t]
    # streamed token by token: one chunk per token, or a few tokens together when they
    # reached the stream together (the relay writes what one read gave as one chunk)
    assert 1 < len(texts) <= 24
    assert all(re.fullmatch(r" ?\S+( \S+)*", t) for t in texts), texts  # whole tokens
    assert "".join(t or "" for t in content) == whole.choices[0].message.content
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finishing] == ["stop"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()  # type: ignore[union-attr]
    assert {c.id for c in chunks} == {chunks[0].id}


async def test_a_stream_without_usage_sends_none(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(model=FAKE_MODEL, messages=[HELLO], stream=True)
    chunks = [chunk async for chunk in stream]
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"temperature": 5}, "temperature"),
        ({"n": 2}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 100_000}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"temperature": "1"}, "temperature"),
        ({"seed": 1.5}, "seed"),
        ({"store": 1}, "store"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ],
)
async def test_a_bad_request_names_its_parameter(
    oai: openai.AsyncOpenAI, params: dict[str, Any], param: str
) -> None:
    body: dict[str, Any] = {"model": FAKE_MODEL, "messages": [HELLO], **params}
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(**body)
    assert caught.value.status_code == 400
    assert caught.value.param == param
    assert caught.value.body["param"] == param  # type: ignore[index]


async def test_an_unknown_model_is_not_found(oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await oai.chat.completions.create(model="gpt-17", messages=[HELLO])
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"


async def test_a_wrong_key_is_an_authentication_error(run_client: httpx.AsyncClient) -> None:
    client = openai.AsyncOpenAI(base_url=_v1(run_client), api_key="pk_nope")
    with pytest.raises(openai.AuthenticationError):
        await client.models.list()
    await client.close()


async def test_every_answer_carries_rate_limit_headers(
    run_client: httpx.AsyncClient, api_key: str
) -> None:
    auth = bearer(api_key)
    models = await run_client.get("/v1/models", headers=auth)
    body = {"model": FAKE_MODEL, "messages": [HELLO]}
    whole = await run_client.post("/v1/chat/completions", json=body, headers=auth)
    streamed = await run_client.post(
        "/v1/chat/completions", json={**body, "stream": True}, headers=auth
    )
    bad = await run_client.post(
        "/v1/chat/completions", json={**body, "temperature": -1}, headers=auth
    )
    assert [r.status_code for r in (models, whole, streamed, bad)] == [200, 200, 200, 400]
    for r in (models, whole, streamed, bad):
        assert all(h in r.headers for h in RATE_HEADERS), r.headers
    assert streamed.text.endswith("data: [DONE]\n\n")
    capacity = int(models.headers["x-ratelimit-limit-tokens"])
    assert int(whole.headers["x-ratelimit-remaining-tokens"]) < capacity


async def test_closing_a_stream_frees_the_engine_slot_within_a_second(
    oai: openai.AsyncOpenAI, run_services: Services, run_client: httpx.AsyncClient, api_key: str
) -> None:
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    engine.config = replace(engine.config, inter_token_latency=0.05, output_tokens=400)
    stream = await oai.chat.completions.create(model=FAKE_MODEL, messages=[HELLO], stream=True)
    seen = 0
    async for chunk in stream:
        seen += bool(chunk.choices and chunk.choices[0].delta.content)
        if seen == 3:
            break
    assert engine.busy_slots == 1
    run_id = _run_id(chunk.id)
    await stream.close()

    async def freed() -> bool:
        return engine.busy_slots == 0

    await eventually(freed, "the engine slot to be freed", timeout=1.0)
    run = await wait_run(run_client, bearer(api_key), run_id)
    assert run["status"] == "cancelled"
    assert 3 <= run["usage"]["completion_tokens"] < 400


async def test_a_running_program_run_has_its_prompt_counted(
    oai: openai.AsyncOpenAI, run_services: Services, run_client: httpx.AsyncClient, api_key: str
) -> None:
    """A worker lost mid-answer is charged prompt + completion: the prompt's length is on
    the run while it runs (a run handed to this process's worker gets it at birth)."""
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    engine.config = replace(engine.config, inter_token_latency=0.05, output_tokens=400)
    stream = await oai.chat.completions.create(
        model=FAKE_MODEL, messages=[SYSTEM, HELLO], stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    run = (await run_client.get(f"/api/runs/{_run_id(chunk.id)}", headers=bearer(api_key))).json()
    await stream.close()
    assert run["status"] == "running"
    expected = engine.count_prompt_tokens(FAKE_MODEL, [ChatMessage(**m) for m in (SYSTEM, HELLO)])
    assert run["usage"]["prompt_tokens"] == expected


async def test_a_program_run_made_in_an_api_process_is_counted_at_birth(
    stack: tuple[str, str], run_settings: Settings
) -> None:
    """Split stack (an api process, a worker process): a program's run is made with its
    prompt counted as the model's engine counts it, so it has it while queued, and the
    worker that runs it stores nothing between its claim and its end (one UPDATE of the
    run's prompt length in the worker: its end's)."""
    bus = await make_bus(stack[1], bus_limits(run_settings))
    api = services_for(run_settings, bus=bus)  # no engine, no worker: `parley api`
    worker = services_for(run_settings, bus=bus, worker=True)
    statements: list[str] = []
    worker_engine = worker.db.engine.sync_engine
    event.listen(worker_engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    await api.start()
    try:
        async with (
            served(create_app(api, close_services=False)) as base,
            httpx.AsyncClient(base_url=base, timeout=30) as client,
        ):
            key = await new_api_key(client, "split@example.com")
            body = {"model": FAKE_MODEL, "messages": [SYSTEM, HELLO], "stream": True}
            async with client.stream(
                "POST", "/v1/chat/completions", json=body, headers=bearer(key)
            ) as r:
                assert r.status_code == 200
                run_id = r.headers["x-parley-run-id"]
                queued = (await client.get(f"/api/runs/{run_id}", headers=bearer(key))).json()
                await worker.start()
                text = "".join([line async for line in r.aiter_lines()])
            ended = await wait_run(client, bearer(key), run_id)
    finally:
        await worker.close(grace=1)
        await api.close()
    expected = FakeEngine().count_prompt_tokens(
        FAKE_MODEL, [ChatMessage(**m) for m in (SYSTEM, HELLO)]
    )
    assert queued["status"] == "queued"
    assert queued["usage"]["prompt_tokens"] == expected
    assert "[DONE]" in text and ended["status"] == "completed"
    assert ended["usage"]["prompt_tokens"] == expected
    sets = [q.split(" WHERE ")[0] for q in statements if q.lstrip().startswith("UPDATE runs")]
    stored = [q for q in sets if "prompt_tokens=" in q]
    assert len(stored) == 1, stored


async def test_concurrent_completions_with_one_key_make_one_run(
    run_client: httpx.AsyncClient, api_key: str, run_services: Services
) -> None:
    """A program's run is written in one statement of its own: two requests with one key
    racing to write it still make one run, the loser answered with the winner's."""
    headers = {**bearer(api_key), "Idempotency-Key": "key-1"}
    body = {"model": FAKE_MODEL, "messages": [SYSTEM, HELLO]}
    url = "/v1/chat/completions"
    responses = await asyncio.gather(
        *(run_client.post(url, json=body, headers=headers) for _ in range(6))
    )  # (a user holds at most 8 streams at once)
    assert [r.status_code for r in responses] == [200] * 6, [r.text for r in responses][:1]
    assert len({r.json()["id"] for r in responses}) == 1
    assert len({r.headers["x-parley-run-id"] for r in responses}) == 1
    engine = run_services.engine
    assert isinstance(engine, FakeEngine)
    assert engine.started == 1


async def test_store_keeps_the_conversation_as_a_chat(
    oai: openai.AsyncOpenAI, run_client: httpx.AsyncClient, api_key: str
) -> None:
    earlier: list[ChatCompletionMessageParam] = [
        SYSTEM,
        {"role": "user", "content": "First question\nwith a second line"},
        {"role": "assistant", "content": "First answer"},
        {"role": "user", "content": "/echo kept as a chat"},
    ]
    done = await oai.chat.completions.create(
        model=FAKE_MODEL, messages=earlier, extra_body={"store": True}
    )
    assert done.choices[0].message.content == "kept as a chat"
    auth = bearer(api_key)
    run = (await run_client.get(f"/api/runs/{_run_id(done.id)}", headers=auth)).json()
    assert run["source"] == "api" and run["chat_id"] is not None
    chats = (await run_client.get("/api/chats", headers=auth)).json()["data"]
    assert [(c["id"], c["title"]) for c in chats] == [
        (run["chat_id"], "First question")  # the one title rule: parley.text.title_from
    ]
    r = await run_client.get(
        f"/api/chats/{run['chat_id']}/messages", params={"order": "asc"}, headers=auth
    )
    history = [(m["role"], m["content"], m["status"]) for m in r.json()["data"]]
    assert history == [
        ("system", "You are terse.", "completed"),
        ("user", "First question\nwith a second line", "completed"),
        ("assistant", "First answer", "completed"),
        ("user", "/echo kept as a chat", "completed"),
        ("assistant", "kept as a chat", "completed"),
    ]


async def test_store_needs_a_last_user_message(oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(
            model=FAKE_MODEL,
            messages=[HELLO, {"role": "assistant", "content": "Hi"}],
            extra_body={"store": True},
        )
    assert caught.value.param == "messages"


@pytest.mark.parametrize("param", ["top_k", "min_p", "frequency_penalty", "logit_bias"])
async def test_a_sampling_parameter_the_models_engine_cannot_honour_is_refused(
    oai: openai.AsyncOpenAI, param: str
) -> None:
    """The fake engine declares only the basic parameters (engines/kinds.py): the rest are
    refused before the run is made, naming the parameter."""
    value: object = {"7": 1} if param == "logit_bias" else 1
    with pytest.raises(openai.BadRequestError) as refused:
        await oai.chat.completions.create(
            model=FAKE_MODEL, messages=[HELLO], extra_body={param: value}
        )
    assert refused.value.body is not None
    error: dict[str, Any] = refused.value.body  # type: ignore[assignment]
    assert (error["param"], error["code"]) == (param, "unsupported_parameter")
