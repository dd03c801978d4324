"""An OpenAI-compatible server that misbehaves one way, for the upstream engine's failure tests.

    python -m tests.fleet.misbehaving MODE PORT [CERT KEY]

Modes (``POST /v1/chat/completions``):

* ``error500``: a 500 with an OpenAI error body;
* ``reject400``: a 400 naming what is wrong with the request;
* ``context``: a 400 saying the prompt passes the model's context length;
* ``hang``: accepts the request and never answers;
* ``malformed``: streams one good chunk, then a chunk that is not JSON;
* ``cut``: streams two good chunks, then drops the connection;
* ``silent``: streams one good chunk, then nothing, with the connection open;
* ``quirky``: a good answer as real servers send them: keep-alive comments, ``event:`` and
  ``id:`` lines, a role-only first chunk, ``reasoning_content`` and ``logprobs`` fields,
  ``usage: null`` on every chunk, chunks of several tokens, the finish reason on its own
  chunk, then a usage chunk (prompt 21 of which 16 cached, completion 7) and ``[DONE]``;
* ``no-usage``: three content chunks and a ``length`` finish, no usage and no ``[DONE]``;
* ``gzip``: the ``quirky`` answer gzipped, with ``Content-Encoding: gzip`` (as a compressing
  proxy in front of a server sends it);
* ``redirect``: a ``307`` to ``/v1/moved/chat/completions``, which gives the ``quirky``
  answer (a client that follows redirects gets an answer; the count has two requests);
* the streams of ``tests.fleet.scripted`` (tool calls, reasoning), by their names.

``GET /v1/models`` answers 200 (its probes pass), ``GET /count`` the number of chat requests,
the client port of each (one port per connection) and the Authorization and ``traceparent``
headers and JSON body of the last one.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import struct
import sys
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fleet.scripted import SCRIPTS

MODES = (
    "error500",
    "reject400",
    "context",
    "hang",
    "malformed",
    "cut",
    "silent",
    "quirky",
    "no-usage",
    "gzip",
    "redirect",
    *SCRIPTS,
)
FIRST = "Hello"
MOVED = "/v1/moved/chat/completions"


def _chunk(text: str) -> bytes:
    body = {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


def _raw(choices: list[dict[str, object]], **extra: object) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    return f"data: {json.dumps({**body, 'choices': choices, **extra})}\n\n".encode()


async def quirky() -> AsyncIterator[bytes]:
    yield b": keep-alive\n\n"
    yield _raw([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}], usage=None)
    yield b"event: message\nid: 1\n"
    yield _raw([{"index": 0, "delta": {"reasoning_content": "thinking..."}}], usage=None)
    yield b": still here\n\n"
    for text in ("Quirky ", "but ", "fine."):
        delta = {"content": text, "reasoning_content": None}
        yield _raw([{"index": 0, "delta": delta, "logprobs": {"content": []}}], usage=None)
    yield _raw([{"index": 0, "delta": {}, "finish_reason": "stop"}], usage=None)
    usage = {
        "prompt_tokens": 21,
        "completion_tokens": 7,
        "total_tokens": 28,
        "prompt_tokens_details": {"cached_tokens": 16},  # as vLLM reports its prefix cache
    }
    yield _raw([], usage=usage)
    yield b"data: [DONE]\n\n"


async def no_usage() -> AsyncIterator[bytes]:
    for i, text in enumerate(("Counted ", "by ", "chunks")):
        finish = "length" if i == 2 else None
        yield _raw([{"index": 0, "delta": {"content": text}, "finish_reason": finish}])


def _vector(text: str, dimensions: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [round(digest[i % len(digest)] / 255, 6) for i in range(dimensions)]


def app(mode: str) -> Starlette:
    count: dict[str, object] = {
        "requests": 0,
        "authorization": None,
        "traceparent": None,
        "client_ports": [],  # one per chat request: a new port is a new connection
        "body": None,  # the last chat request's JSON body
    }
    ports: list[int] = []

    async def stream() -> AsyncIterator[bytes]:
        yield _chunk(FIRST)
        if mode == "malformed":
            yield b"data: {this is not json\n\n"
        elif mode == "cut":
            yield _chunk(" world")
            await asyncio.sleep(0.05)
            raise ConnectionAbortedError("dropping the connection mid-answer")
        await asyncio.Event().wait()  # silent (and after a malformed chunk): never another byte

    async def chat(request: Request) -> Response:
        count["requests"] = int(str(count["requests"])) + 1
        count["authorization"] = request.headers.get("authorization")
        count["traceparent"] = request.headers.get("traceparent")
        ports.append(request.client.port if request.client else 0)
        count["client_ports"] = ports
        count["body"] = json.loads(await request.body())
        if mode == "error500":
            return JSONResponse({"error": {"message": "the GPU caught fire"}}, status_code=500)
        if mode == "reject400":
            message = "temperature must be at most 1.5 for this model"
            body = {"error": {"message": message, "type": "invalid_request_error"}}
            return JSONResponse(body, status_code=400)
        if mode == "context":
            message = "This model's maximum context length is 2048 tokens; you asked for 9000"
            body = {"error": {"message": message, "code": "context_length_exceeded"}}
            return JSONResponse(body, status_code=400)
        if mode == "hang":
            await asyncio.Event().wait()
        if mode == "redirect" and request.url.path != MOVED:
            return RedirectResponse(MOVED, status_code=307)
        if mode in ("quirky", "redirect"):
            return StreamingResponse(quirky(), media_type="text/event-stream")
        if mode == "gzip":
            packed = gzip.compress(b"".join([piece async for piece in quirky()]))
            headers = {"Content-Encoding": "gzip"}
            return Response(packed, media_type="text/event-stream", headers=headers)
        if mode == "no-usage":
            return StreamingResponse(no_usage(), media_type="text/event-stream")
        if mode in SCRIPTS:
            script = SCRIPTS[mode](dict(count["body"]))  # type: ignore[call-overload]
            return StreamingResponse(script, media_type="text/event-stream")
        return StreamingResponse(stream(), media_type="text/event-stream")

    async def embeddings(request: Request) -> Response:
        """Vectors made from the texts (the same text, the same vector), in the encoding
        asked for; its usage counts words."""
        count["embeddings"] = int(str(count.get("embeddings", 0))) + 1
        count["embeddings_body"] = body = json.loads(await request.body())
        if mode == "error500":
            return JSONResponse({"error": {"message": "the GPU caught fire"}}, status_code=500)
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        data = []
        for i, text in enumerate(texts):
            vector = _vector(str(text), int(body.get("dimensions") or 4))
            if body.get("encoding_format") == "base64":
                packed = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                data.append({"object": "embedding", "index": i, "embedding": packed})
            else:
                data.append({"object": "embedding", "index": i, "embedding": vector})
        words = sum(len(str(t).split()) for t in texts)
        usage = {"prompt_tokens": words, "total_tokens": words}
        return JSONResponse(
            {"object": "list", "data": data, "model": body["model"], "usage": usage}
        )

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def counted(_: Request) -> Response:
        return JSONResponse(count)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route(MOVED, chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/count", counted),
        ]
    )


if __name__ == "__main__":
    mode, port, *tls = sys.argv[1:]
    assert mode in MODES, f"mode must be one of {MODES}"
    cert, key = tls if tls else (None, None)  # HTTPS with this certificate and key
    uvicorn.run(
        app(mode),
        host="127.0.0.1",
        port=int(port),
        log_level="warning",
        ssl_certfile=cert,
        ssl_keyfile=key,
    )
