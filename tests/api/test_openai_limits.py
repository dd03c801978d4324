"""OpenAI's API when the token budget runs out: a 429 the official ``openai`` package
raises as ``RateLimitError``, and whose ``Retry-After`` its own retries honour."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from parley.engines.fake import FAKE_MODEL
from tests.helpers import new_api_key

# 60 tokens of budget refilled at one a second. The first request reserves 40 + 3 = 43 and
# settles to the fake engine's 6 + 24 = 30, leaving 30; the next asks for 32 + 3 = 35, so it
# is refused for about 5 s (a machine may stall that long between the two and the test still
# holds), and a retry after Retry-After is admitted.
HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello"}]
FIRST_MAX_TOKENS = 40
MAX_TOKENS = 32


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {
        "default_tier": "metered",
        "tiers": {
            "metered": {
                "priority": 0,
                "tokens_per_minute": 60,
                "burst_tokens": 60,
                "max_concurrent_runs": 4,
                "max_output_tokens": 100,
            }
        },
    }


@pytest.fixture
async def api_key(run_client: httpx.AsyncClient) -> str:
    return await new_api_key(run_client, "prog@example.com")


Seen = list[tuple[int, float, dict[str, str]]]


@pytest.fixture
async def seen() -> Seen:
    return []


@pytest.fixture
async def oai(
    run_client: httpx.AsyncClient, api_key: str, seen: Seen
) -> AsyncIterator[openai.AsyncOpenAI]:
    async def record(response: Any) -> None:
        seen.append((response.status_code, time.monotonic(), dict(response.headers)))

    http = openai.DefaultAsyncHttpxClient(event_hooks={"response": [record]})
    client = openai.AsyncOpenAI(
        base_url=f"{str(run_client.base_url).rstrip('/')}/v1",
        api_key=api_key,
        max_retries=0,
        http_client=http,
    )
    yield client
    await client.close()


async def _spend(oai: openai.AsyncOpenAI) -> None:
    done = await oai.chat.completions.create(
        model=FAKE_MODEL,
        messages=HELLO,
        max_tokens=FIRST_MAX_TOKENS,
    )
    assert done.usage is not None and done.usage.total_tokens == 30


async def test_an_exhausted_budget_is_a_rate_limit_error(
    oai: openai.AsyncOpenAI, seen: Seen
) -> None:
    await _spend(oai)
    with pytest.raises(openai.RateLimitError) as caught:
        await oai.chat.completions.create(
            model=FAKE_MODEL,
            messages=HELLO,
            max_tokens=MAX_TOKENS,
        )
    assert caught.value.code == "budget_exhausted"
    headers = caught.value.response.headers
    assert int(headers["retry-after"]) >= 1
    assert int(headers["x-ratelimit-remaining-tokens"]) < MAX_TOKENS + 3
    assert headers["x-ratelimit-limit-tokens"] == "60"
    assert [status for status, _, _ in seen] == [200, 429]


async def test_the_clients_own_retry_honours_retry_after(
    oai: openai.AsyncOpenAI, seen: Seen
) -> None:
    await _spend(oai)
    done = await oai.with_options(max_retries=3).chat.completions.create(
        model=FAKE_MODEL,
        messages=HELLO,
        max_tokens=MAX_TOKENS,
    )
    assert done.choices[0].finish_reason == "stop"
    statuses = [status for status, _, _ in seen]
    assert statuses[0] == 200 and statuses[-1] == 200
    refused = [(at, h) for status, at, h in seen if status == 429]
    assert refused, f"the second request was not refused first: {statuses}"
    for (at, headers), (_, next_at, _) in zip(refused, seen[2:], strict=True):
        waited = next_at - at
        assert waited >= int(headers["retry-after"]), (waited, headers["retry-after"])
