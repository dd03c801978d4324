"""The floor of parley's token path in Python: Redis Streams to SSE with nothing else.

    python bench/bare_relay.py relay --port P --redis URL --namespace NS
    python bench/bare_relay.py producer --redis URL --namespace NS --tokens N [--itl-ms 50]

``bench/relay.py`` (part 2, ``--load-stacks bare``) runs the two as processes and loads them
as it loads parley, measuring each one's CPU per token delivered beside parley's api and
worker (issue 48: parley's goal is within 2x of this).

* the **relay** answers the three requests the load client makes (sign-up, a new chat, a
  message), the message as an SSE stream: it asks the producer for a stream (``LPUSH``) and
  writes each entry of it, as stored, as an SSE frame. One process-wide ``XREAD BLOCK`` over
  every stream open here (as parley's api reads: ``bus/redis/tail.py``), each batch of a
  stream written to its client in one write. No auth, no database, no accounting, no
  resumption: what parley's relay does beyond this is what it costs.
* the **producer** stands for the worker: every ``itl-ms`` it appends one token to every
  stream it is generating, all of a tick's appends in one pipeline (parley's worker batches
  its appends to one script call per flush); ``done`` after ``tokens``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import uuid
from typing import Any, cast

import redis.asyncio as aioredis
from stacks import loop_runner

Entries = list[tuple[str, dict[str, str]]]
DELTA = json.dumps({"text": "word ", "tokens": 1})
DONE = json.dumps({"status": "completed"})


# -- the relay --------------------------------------------------------------------------


class Tail:
    """One ``XREAD BLOCK`` for every stream open in this process; entries to each reader's
    queue."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis = redis
        self.readers: dict[str, tuple[str, asyncio.Queue[Entries]]] = {}
        self.woken = asyncio.Event()

    def follow(self, key: str) -> asyncio.Queue[Entries]:
        queue: asyncio.Queue[Entries] = asyncio.Queue()
        self.readers[key] = ("0-0", queue)
        self.woken.set()
        return queue

    async def run(self) -> None:
        while True:
            if not self.readers:
                self.woken.clear()
                await self.woken.wait()
            streams: dict[Any, Any] = {key: last for key, (last, _) in self.readers.items()}
            got = cast(list[tuple[str, Entries]], await self.redis.xread(streams, block=20))
            for key, entries in got or []:
                reader = self.readers.get(key)
                if reader is not None:
                    self.readers[key] = (entries[-1][0], reader[1])
                    reader[1].put_nowait(entries)


async def serve_relay(port: int, redis_url: str, namespace: str) -> None:
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
    tail = Tail(redis)
    tail_task = asyncio.create_task(tail.run())

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await _one_request(reader, writer, redis, tail, namespace):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()
    tail_task.cancel()


async def _one_request(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    redis: aioredis.Redis,
    tail: Tail,
    namespace: str,
) -> bool:
    """Answer one request; whether the connection stays open for another."""
    head = await reader.readuntil(b"\r\n\r\n")
    line, *headers = head.decode("latin-1").split("\r\n")
    method, path, _ = line.split(" ", 2)
    length = next(
        (int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:")), 0
    )
    if length:
        await reader.readexactly(length)
    if path == "/readyz":
        return _json(writer, {"status": "ready"})
    if path == "/api/auth/signup":
        return _json(writer, {"token": "bare"}, 201)
    if path == "/api/chats":
        return _json(writer, {"id": uuid.uuid4().hex}, 201)
    if method == "POST" and path.endswith("/messages"):
        await _stream(writer, redis, tail, namespace)
        return False
    return _json(writer, {"error": "not found"}, 404)


def _json(writer: asyncio.StreamWriter, body: object, status: int = 200) -> bool:
    data = json.dumps(body).encode()
    writer.write(
        f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return True


async def _stream(
    writer: asyncio.StreamWriter, redis: aioredis.Redis, tail: Tail, namespace: str
) -> None:
    stream_id = uuid.uuid4().hex
    key = f"{namespace}:s:{stream_id}"
    queue = tail.follow(key)
    await redis.lpush(f"{namespace}:start", stream_id)
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Connection: close\r\n\r\n"
    )
    try:
        while True:
            entries = await queue.get()
            frames = [f"id: {i}\nevent: {f['k']}\ndata: {f['d']}\n\n" for i, f in entries]
            writer.write("".join(frames).encode())
            await writer.drain()
            if entries[-1][1]["k"] == "done":
                return
    finally:
        tail.readers.pop(key, None)


# -- the producer -----------------------------------------------------------------------


async def produce(redis_url: str, namespace: str, tokens: int, itl_ms: float) -> None:
    redis = aioredis.Redis.from_url(redis_url, decode_responses=True)
    left: dict[str, int] = {}  # stream key: tokens still to send

    async def take() -> None:
        while True:
            got = cast(tuple[str, str] | None, await redis.blpop([f"{namespace}:start"], timeout=0))
            if got is not None:
                left[f"{namespace}:s:{got[1]}"] = tokens

    taker = asyncio.create_task(take())
    loop = asyncio.get_running_loop()
    next_tick = loop.time()
    try:
        while True:
            next_tick += itl_ms / 1000
            if left:
                async with redis.pipeline(transaction=False) as pipe:
                    for key, n in list(left.items()):
                        if n > 0:
                            pipe.xadd(key, {"k": "delta", "d": DELTA})
                            left[key] = n - 1
                        else:
                            pipe.xadd(key, {"k": "done", "d": DONE})
                            pipe.expire(key, 60)
                            del left[key]
                    await pipe.execute()
            await asyncio.sleep(max(0.0, next_tick - loop.time()))
    finally:
        taker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await taker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=["relay", "producer"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--namespace", default="bare")
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--itl-ms", type=float, default=50)
    args = parser.parse_args()
    run = loop_runner()
    if args.role == "relay":
        run(serve_relay(args.port, args.redis, args.namespace))
    else:
        run(produce(args.redis, args.namespace, args.tokens, args.itl_ms))


if __name__ == "__main__":
    main()
