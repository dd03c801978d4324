"""A small TCP fault proxy for the fault suite: put between a process and Redis or Postgres,
it passes bytes both ways until told to fail, as a network or a server would:

* ``cut()``: every open connection is closed and new ones are refused (the server is down);
  ``restore()`` lets them through again (it came back);
* ``delay(seconds)``: every chunk, each way, waits this long first (a slow link);
* ``drop_after(n)``: each connection opened from now on is closed once it has carried ``n``
  bytes towards the server (a connection cut mid-request);
* ``reset_on_next_request()``: each connection open now is reset when it next carries bytes
  either way, which never get there (its server restarted behind it, unsaid: a request
  waiting for its reply, as a blocking read, fails too).

One asyncio server on 127.0.0.1 at a free port (``port``), in the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Pipe:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    doomed: bool = False

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for writer in (self.client, self.upstream):
            with contextlib.suppress(Exception):
                writer.transport.abort()  # a reset, not a polite FIN: as a dead server


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = 0  # accepted since the start, refused ones not counted
        self._server: asyncio.Server | None = None
        self._pipes: set[_Pipe] = set()
        self._down = False
        self._delay = 0.0
        self._drop_after: int | None = None

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def cut(self) -> None:
        self._down = True
        for pipe in list(self._pipes):
            pipe.close()
        self._pipes.clear()

    def restore(self) -> None:
        """Let connections through again, every fault cleared."""
        self._down = False
        self._delay = 0.0
        self._drop_after = None

    def restore_connections_only(self) -> None:
        """Accept connections again, keeping the delay and drop-after faults set."""
        self._down = False

    def delay(self, seconds: float) -> None:
        self._delay = seconds

    def drop_after(self, count: int | None) -> None:
        self._drop_after = count

    def reset_on_next_request(self) -> None:
        for pipe in self._pipes:
            pipe.doomed = True

    @property
    def open_connections(self) -> int:
        return len(self._pipes)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        pipe = _Pipe(writer, up_writer)
        self._pipes.add(pipe)
        limit = self._drop_after
        pipe.tasks = [
            asyncio.create_task(self._pump(reader, up_writer, pipe, limit)),
            asyncio.create_task(self._pump(up_reader, writer, pipe, None)),
        ]

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pipe: _Pipe,
        limit: int | None,
    ) -> None:
        carried = 0
        try:
            while data := await reader.read(65536):
                if self._delay:
                    await asyncio.sleep(self._delay)
                if pipe.doomed:
                    break  # a request, or a reply to one sent before: reset both ends
                if limit is not None and carried + len(data) > limit:
                    writer.write(data[: limit - carried])
                    break
                carried += len(data)
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._pipes.discard(pipe)
            pipe.close()
