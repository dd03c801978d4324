"""A minimal, fast OpenAI-compatible server: the upstream of `bench/gateway.py`.

    python bench/fast_upstream.py --port 8399 [--tokens 32] [--model fast-upstream]

Raw asyncio HTTP/1.1 on uvloop when installed (keep-alive; no framework), so its own cost,
which counts in the "direct" figures, stays small. It serves:

* ``POST /v1/chat/completions`` streamed (``"stream": true``): one chunk per token, exactly
  ``min(max_tokens, --tokens)`` content chunks (`` w0``, `` w1``, …; the first also carries
  ``"role": "assistant"``), then a chunk with an empty delta and ``finish_reason``
  (``length`` when ``max_tokens`` cut the answer, else ``stop``), then, with
  ``stream_options.include_usage``, a usage chunk (``"choices": []``), then
  ``data: [DONE]``. Chunks are shaped as ``parley.openai.protocol.ChatCompletionChunk``
  dumps them; each is written on its own and the loop runs other streams between two (a
  server producing tokens, not a canned body).
* the same request without ``stream``: one ``chat.completion`` JSON body.
* ``GET /v1/models`` (and ``GET /models``, ``GET /health``): parley's router probes
  ``{base_url}/models``.

Prompt tokens are counted as parley estimates them for an upstream (about four characters a
token). Anything else is a 404; a body that is not a JSON request is a 400.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import time
from typing import Any, cast

_ids = itertools.count()
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Content Too Large"}
MAX_BODY = 1 << 20


def _response(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _error(status: int, message: str) -> bytes:
    body = {"error": {"message": message, "type": "invalid_request_error"}}
    return _response(status, json.dumps(body).encode())


def _chunked(payload: bytes) -> bytes:
    """One SSE event as one HTTP/1.1 chunk."""
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
_DONE = _chunked(b"[DONE]") + b"0\r\n\r\n"


class Answer:
    """The pieces of one answer, pre-encoded."""

    def __init__(self, model: str, request: dict[str, Any], tokens: int) -> None:
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        self.n = min(int(limit), tokens) if isinstance(limit, int) and limit > 0 else tokens
        self.finish = "length" if self.n < tokens else "stop"
        self.id = f"chatcmpl-fast{next(_ids)}"
        self.created = int(time.time())
        self.model = model
        messages = request.get("messages") or []
        self.prompt_tokens = (
            sum(len(str(m.get("content") or "")) // 4 + 4 for m in messages if isinstance(m, dict))
            + 2
        )
        options = request.get("stream_options")
        self.usage = isinstance(options, dict) and bool(options.get("include_usage"))

    def _chunk(self, choices: str, usage: str = "") -> bytes:
        return (
            f'{{"id":"{self.id}","object":"chat.completion.chunk","created":{self.created},'
            f'"model":"{self.model}","choices":{choices}{usage}}}'
        ).encode()

    def content_chunks(self) -> list[bytes]:
        out = []
        for i in range(self.n):
            role = '"role":"assistant",' if i == 0 else ""
            choice = f'[{{"index":0,"delta":{{{role}"content":" w{i}"}}}}]'
            out.append(_chunked(self._chunk(choice)))
        return out

    def tail(self) -> bytes:
        choice = f'[{{"index":0,"delta":{{}},"finish_reason":"{self.finish}"}}]'
        finish = _chunked(self._chunk(choice))
        if not self.usage:
            return finish + _DONE
        total = self.prompt_tokens + self.n
        usage = (
            f',"usage":{{"prompt_tokens":{self.prompt_tokens},'
            f'"completion_tokens":{self.n},"total_tokens":{total}}}'
        )
        return finish + _chunked(self._chunk("[]", usage)) + _DONE

    def completion(self) -> bytes:
        text = "".join(f" w{i}" for i in range(self.n))
        body = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": self.finish,
                }
            ],
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.n,
                "total_tokens": self.prompt_tokens + self.n,
            },
        }
        return _response(200, json.dumps(body, separators=(",", ":")).encode())


class Connection(asyncio.Protocol):
    """One client connection: requests read in turn, each answered before the next is read."""

    def __init__(self, server: Upstream) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.writable = asyncio.Event()
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass of it

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        """Answer the next complete request in the buffer, if there is one."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.transport is None:
            return
        head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        method, target, _ = [*head[0].split(" ", 2), "", ""][:3]
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip() or 0)
        if length > MAX_BODY:
            self.transport.write(_error(413, "body too large"))
            self.transport.close()
            return
        if len(self.buffer) < end + 4 + length:
            return
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        self.busy = True
        asyncio.get_running_loop().create_task(self._answer(method, target, body))

    async def _answer(self, method: str, target: str, body: bytes) -> None:
        try:
            await self._route(method, target.split("?", 1)[0], body)
        finally:
            self.busy = False
            if self.transport is not None:
                self._next()

    async def _route(self, method: str, path: str, body: bytes) -> None:
        assert self.transport is not None
        if method == "GET" and path in ("/v1/models", "/models"):
            self.transport.write(_response(200, self.server.models))
        elif method == "GET" and path == "/health":
            self.transport.write(_response(200, b'{"status":"ok"}'))
        elif method == "POST" and path in ("/v1/chat/completions", "/chat/completions"):
            try:
                request = json.loads(body)
                assert isinstance(request, dict) and request.get("messages")
            except (ValueError, AssertionError):
                self.transport.write(_error(400, "expected a chat completion request"))
                return
            answer = Answer(self.server.model, request, self.server.tokens)
            if request.get("stream"):
                await self._stream(answer)
            else:
                self.transport.write(answer.completion())
        else:
            self.transport.write(_error(404, f"no route {method} {path}"))

    async def _stream(self, answer: Answer) -> None:
        assert self.transport is not None
        self.transport.write(_STREAM_HEAD)
        for chunk in answer.content_chunks():
            await asyncio.sleep(0)  # let the other streams' tokens out between two of ours
            if self.transport is None:
                return
            if not self.writable.is_set():
                await self.writable.wait()
                if self.transport is None:
                    return
            self.transport.write(chunk)
        self.transport.write(answer.tail())


class Upstream:
    def __init__(self, model: str, tokens: int) -> None:
        self.model = model
        self.tokens = tokens
        card = {"id": model, "object": "model", "created": 0, "owned_by": "bench"}
        self.models = json.dumps({"object": "list", "data": [card]}).encode()


async def serve(host: str, port: int, model: str, tokens: int) -> None:
    upstream = Upstream(model, tokens)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(upstream), host, port, backlog=1024)
    print(f"fast upstream on http://{host}:{port}/v1 ({model}, {tokens} tokens)", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8399)
    parser.add_argument("--model", default="fast-upstream")
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    try:
        import uvloop  # optional: faster when installed
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(serve(args.host, args.port, args.model, args.tokens))


if __name__ == "__main__":
    main()
