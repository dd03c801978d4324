"""A program's run through ``/v1`` under the content policy, on both run stacks: a refused
prompt is OpenAI's 400; an answer stopped while it streams ends as OpenAI's filtered answers
do, ``finish_reason: content_filter`` with the text approved before it (streamed or whole),
not an error."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from parley.services import Services
from tests.helpers import user_headers

RULES = {
    "kind": "rules",
    "categories": {
        "violence": {"patterns": [r"\bforbidden\b"], "stages": ["output"]},
        "secrets": {"patterns": [r"\bhunter2\b"], "stages": ["input"]},
    },
}
ANSWER = "/echo alpha beta forbidden gamma delta"


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {"safety": {"classifiers": {"rules": RULES}}}


def body(services: Services, content: str, **more: Any) -> dict[str, Any]:
    return {
        "model": services.models[0],
        "messages": [{"role": "user", "content": content}],
        **more,
    }


async def test_a_stopped_answer_is_a_content_filter_finish_with_the_text_before_it(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    r = await run_client.post("/v1/chat/completions", json=body(run_services, ANSWER), headers=auth)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "content_filter"
    assert choice["message"]["content"].strip() == "alpha beta"


async def test_a_stopped_streamed_answer_ends_with_content_filter_and_no_error_chunk(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chunks: list[dict[str, Any]] = []
    async with run_client.stream(
        "POST", "/v1/chat/completions", json=body(run_services, ANSWER, stream=True), headers=auth
    ) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    assert all("error" not in c for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.strip() == "alpha beta"
    assert chunks[-1]["choices"][0]["finish_reason"] == "content_filter"


async def test_a_refused_prompt_is_openais_400(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    r = await run_client.post(
        "/v1/chat/completions", json=body(run_services, "my password: hunter2"), headers=auth
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "content_blocked")
    assert error["category"] == "secrets"
