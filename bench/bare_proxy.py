"""The floor of a ``/v1`` gateway in Python: one upstream's stream relayed with nothing else.

    python bench/bare_proxy.py --kind raw|asgi --port P --upstream http://127.0.0.1:U/v1 --key K

``bench/gateway.py`` (targets ``bare`` and ``asgi``) runs it as a process of its own beside
parley and LiteLLM and measures its CPU per answer the same way (issue 48: the per-answer
analogue of ``bench/bare_relay.py``). Either kind, per request: the bearer key compared with
one string, the JSON body parsed and its ``model`` and ``messages`` checked (a gateway reads
what it routes), the request sent upstream on a kept-alive connection and the upstream's SSE
bytes written to the client as they arrive. No chunk parsed, rebuilt, counted or stored; no
accounts, database, bus, admission, billing, resumption or stop.

* ``raw``: asyncio streams on both sides (uvloop), HTTP/1.1 by hand, as the bare relay is
  written: the floor Python reaches on this path.
* ``asgi``: the parts parley's own path is built from, run as parley runs them: uvicorn
  (uvloop, httptools), a Starlette route, one pooled ``httpx.AsyncClient`` on parley's
  upstream transport (``parley.engines.upstream_transport``, aiohttp's HTTP/1.1): the
  floor of that stack. What parley's ``/v1`` spends beyond it is parley's own.
  (``--httpx-transport``: httpx's own transport instead, httpcore over h11, as parley's
  upstream client had it before issue 48's fifth round.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import httpx
import uvicorn
from stacks import loop_runner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from parley.engines.upstream_transport import AiohttpTransport


def routable(body: bytes) -> bool:
    """What a gateway reads of the request to route it: a model and messages."""
    try:
        wire = json.loads(body)
        return isinstance(wire.get("model"), str) and isinstance(wire.get("messages"), list)
    except (ValueError, AttributeError):
        return False


def app(upstream: str, key: str, *, httpx_transport: bool = False) -> Starlette:
    client = httpx.AsyncClient(
        transport=None if httpx_transport else AiohttpTransport(),
        base_url=upstream.rstrip("/"),
        timeout=httpx.Timeout(10.0, read=None),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
    )
    expected = f"Bearer {key}"

    async def completions(request: Request) -> Response:
        if request.headers.get("authorization") != expected:
            return JSONResponse({"error": {"message": "unknown key"}}, status_code=401)
        body = await request.body()
        if not routable(body):
            return JSONResponse({"error": {"message": "model and messages"}}, status_code=400)
        sent = client.build_request(
            "POST",
            "/chat/completions",
            content=body,
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        answer = await client.send(sent, stream=True)

        async def relayed() -> AsyncIterator[bytes]:
            try:
                async for piece in answer.aiter_raw():
                    yield piece
            finally:
                await answer.aclose()

        return StreamingResponse(
            relayed(), status_code=answer.status_code, media_type="text/event-stream"
        )

    async def ready(_: Request) -> Response:
        return JSONResponse({"ok": True})

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/readyz", ready),
        ],
        lifespan=lifespan,
    )


# -- raw: asyncio streams, HTTP/1.1 by hand ----------------------------------------------


class Upstreams:
    """Kept-alive connections to the upstream, one per answer in flight."""

    def __init__(self, base: str) -> None:
        origin, _, prefix = base.removeprefix("http://").partition("/")
        host, _, port = origin.partition(":")
        self.host, self.port, self.path = host, int(port), f"/{prefix}/chat/completions"
        self.free: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def take(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while self.free:
            reader, writer = self.free.pop()
            if not reader.at_eof():
                return reader, writer
            writer.close()
        return await asyncio.open_connection(self.host, self.port)

    def request(self, body: bytes) -> bytes:
        return (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body


def _reply(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    body = json.dumps({"error": {"message": message}}).encode()
    writer.write(
        f"HTTP/1.1 {status} Error\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


async def _relay_chunks(upstream: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The upstream's chunked body to the client, each chunk written as it comes."""
    while True:
        size_line = await upstream.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0], 16)
        if size == 0:
            writer.write(size_line + await upstream.readuntil(b"\r\n"))
            return
        writer.write(size_line + await upstream.readexactly(size + 2))


async def _raw_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstreams: Upstreams, key: str
) -> None:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length") or 0))
    if head[0].split(" ")[1] == "/readyz":
        return _reply(writer, 200, "ready")
    if headers.get("authorization") != f"Bearer {key}":
        return _reply(writer, 401, "unknown key")
    if not routable(body):
        return _reply(writer, 400, "model and messages")
    up_reader, up_writer = await upstreams.take()
    up_writer.write(upstreams.request(body))
    answer_head = await up_reader.readuntil(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in answer_head.lower():
        up_writer.close()
        return _reply(writer, 502, "the upstream did not stream")
    writer.write(answer_head)
    await _relay_chunks(up_reader, writer)
    upstreams.free.append((up_reader, up_writer))


async def serve_raw(port: int, upstream: str, key: str) -> None:
    upstreams = Upstreams(upstream)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await _raw_request(reader, writer, upstreams, key)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kind", choices=("raw", "asgi"), default="raw")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the upstream's /v1 base URL")
    parser.add_argument("--key", required=True, help="the one bearer key it accepts")
    parser.add_argument("--httpx-transport", action="store_true", help="asgi: httpx's own")
    args = parser.parse_args()
    if args.kind == "raw":
        loop_runner()(serve_raw(args.port, args.upstream, args.key))
        return
    uvicorn.run(
        app(args.upstream, args.key, httpx_transport=args.httpx_transport),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
