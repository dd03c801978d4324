"""The upstream engine reading a streamed answer as a server may cut it into pieces."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx

from parley.engines.interface import ChatMessage, FinishReason, GenerationRequest
from parley.engines.settings import UpstreamSettings
from parley.engines.upstream import UpstreamEngine


def _event(choices: list[dict[str, object]], **extra: object) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    return b"data: " + json.dumps({**chunk, "choices": choices, **extra}).encode() + b"\r\n\r\n"


def _content(text: str) -> dict[str, object]:
    return {"index": 0, "delta": {"content": text}, "finish_reason": None}


def _body() -> bytes:
    return b"".join(
        [
            b": keep-alive\r\n\r\n",
            _event([_content("caf\u00e9")]),
            _event([_content(" \u00fcber")]),
            _event([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            _event([], usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}),
            b"data: [DONE]\r\n\r\n",
        ]
    )


async def test_an_answer_cut_anywhere_reads_the_same() -> None:
    """Pieces that split lines, CRLF pairs and UTF-8 characters make the same text."""
    body = _body()
    for size in (1, 2, 3, 7, len(body)):

        async def pieces(size: int = size) -> AsyncIterator[bytes]:
            for i in range(0, len(body), size):
                yield body[i : i + size]

        def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=pieces()
            )

        engine = UpstreamEngine(
            "http://upstream/v1", UpstreamSettings(), transport=httpx.MockTransport(answer)
        )
        request = GenerationRequest("r", "m", [ChatMessage("user", "hi")], 16)
        deltas = [d async for d in engine.stream(request)]
        await engine.close()
        assert "".join(d.text for d in deltas) == "caf\u00e9 \u00fcber", size
        assert sum(d.tokens for d in deltas) == 2, size
        assert deltas[-1].finish_reason is FinishReason.STOP
        assert deltas[-1].prompt_tokens == 5
