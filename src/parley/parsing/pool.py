"""A pool of processes that parse untrusted files, each job bounded in CPU, memory and time.

Parsing a file a client sent (a PDF's text, an import's JSON or zip) can cost far more than
the file's size suggests: a 2 KB PDF can hold a content stream that takes pypdf seconds per
page, a 1 MB zip can inflate to a gigabyte. So it never runs in the server's process: each
job goes to one of ``workers`` processes (forked from a small server that has imported the
parsers, never from the server itself), which

- runs ``nice``'d, so the server's own requests (logins, streams, ``/healthz``) go first;
- has a CPU-time limit per job (``RLIMIT_CPU``: the kernel ends a process past it) and an
  address-space limit (``RLIMIT_AS``: an allocation past it fails, reported as the file
  being too large to parse), and no core dumps;
- is killed at the job's wall deadline, or the moment the caller is cancelled (its client
  went away): a replacement is forked for the next job.

Admission is bounded before any work: one user has at most ``per_user`` jobs in the pool
(429 ``too_many_parses``), and at most ``queue`` jobs wait for a free process (503
``parser_busy``). A job's refusal (a ``ParleyError`` raised in the child: unreadable,
encrypted, too many pages…) comes back as the same status, code, message and param. The
job is sent pickled (the server is trusted); its result comes back as JSON of at most
``MAX_REPLY_BYTES`` (the process read an untrusted file: it is never trusted to send
objects), read on a thread of the pool's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import multiprocessing
import os
import resource
import signal
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar, cast

from parley.errors import ParleyError, RateLimited, Unavailable, ValidationFailed
from parley.parsing.settings import ParsingSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

# modules the fork server imports once, so that a fresh worker starts with them loaded
PRELOAD = ["parley.parsing.jobs"]
MAX_REPLY_BYTES = 64 << 20


class TooManyParses(RateLimited):
    code = "too_many_parses"


class ParserBusy(Unavailable):
    code = "parser_busy"


class FileTooCostly(ValidationFailed):
    code = "file_too_costly"


class JobRefused(ParleyError):
    """A refusal raised by the job in its process, with the status it had there."""

    def __init__(self, status: int, kind: str, code: str, message: str, param: str | None):
        super().__init__(message, code=code, param=param)
        self.status_code = status
        self.type = kind


def _child(conn: Connection, memory_bytes: int, nice: int) -> None:
    """A worker process: run jobs one at a time, each under a fresh CPU-time limit."""
    os.nice(nice)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    base = _address_space()
    resource.setrlimit(resource.RLIMIT_AS, (base + memory_bytes, base + memory_bytes))
    while True:
        try:
            fn, args, cpu_seconds = conn.recv()
        except EOFError:
            return
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = math.ceil(used.ru_utime + used.ru_stime)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (spent + cpu_seconds, hard))
        conn.send_bytes(json.dumps(_outcome(fn, args)).encode())


def _outcome(fn: Callable[..., Any], args: tuple[Any, ...]) -> dict[str, Any]:
    try:
        return {"ok": fn(*args)}
    except MemoryError:
        return {"memory": True}
    except ParleyError as e:
        return {"refused": [e.status_code, e.type, e.code, e.message, e.param]}


def _address_space() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _read_reply(conn: Connection) -> object:
    return json.loads(conn.recv_bytes(MAX_REPLY_BYTES))


class _Worker:
    def __init__(self, ctx: Any, settings: ParsingSettings) -> None:
        parent, child = ctx.Pipe()
        self.conn: Connection = parent
        self.process: BaseProcess = ctx.Process(
            target=_child,
            args=(child, settings.memory_mb << 20, settings.nice),
            name="parley-parser",
            daemon=True,
        )
        self.process.start()
        child.close()

    def kill(self, reading: asyncio.Future[Any] | None = None) -> None:
        """End the process; its pipe is closed once nothing reads it any more."""
        with contextlib.suppress(Exception):
            self.process.kill()
        if reading is None or reading.done():
            self._closed(reading)
        else:  # the thread reading the pipe sees its end now, then it is closed
            reading.add_done_callback(self._closed)

    def _closed(self, reading: asyncio.Future[Any] | None) -> None:
        if reading is not None and not reading.cancelled():
            reading.exception()  # (retrieved: an EOF the killing caused)
        self.conn.close()
        self.process.join(timeout=1)


class ParsePool:
    def __init__(self, settings: ParsingSettings) -> None:
        self.settings = settings
        self._idle: list[_Worker] = []
        self._free: asyncio.Semaphore | None = None
        self._waiting = 0
        self._by_user: Counter[str] = Counter()
        self._io = ThreadPoolExecutor(settings.workers, thread_name_prefix="parley-parse-io")
        self._ctx: Any = None
        self.busy = 0  # jobs on a process now
        # how jobs ended: ok, refused, cpu (over its CPU time), wall (over its time), memory,
        # died (its process, otherwise), cancelled (its caller went away)
        self.outcomes: Counter[str] = Counter()

    async def run(self, user_id: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a parsing process, for ``user_id``; its result or its refusal."""
        if self._by_user[user_id] >= self.settings.per_user:
            raise TooManyParses(
                f"at most {self.settings.per_user} of your files are read at once: "
                "wait for the others",
                retry_after=1,
            )
        free = self._semaphore()
        if free.locked() and self._waiting >= self.settings.queue:
            raise ParserBusy("too many files are being read: try again shortly", retry_after=2)
        self._by_user[user_id] += 1
        try:
            return await self._queued(free, fn, args)
        finally:
            self._by_user[user_id] -= 1
            if not self._by_user[user_id]:
                del self._by_user[user_id]

    async def _queued(self, free: asyncio.Semaphore, fn: Callable[..., T], args: Any) -> T:
        self._waiting += 1
        try:
            async with asyncio.timeout(self.settings.wall_seconds):
                await free.acquire()
        except TimeoutError:
            raise ParserBusy(
                "the file waited too long to be read: try again", retry_after=5
            ) from None
        finally:
            self._waiting -= 1
        try:
            return await self._on_worker(fn, args)
        finally:
            free.release()

    async def _on_worker(self, fn: Callable[..., T], args: Any) -> T:
        loop = asyncio.get_running_loop()
        worker = (
            self._idle.pop() if self._idle else await loop.run_in_executor(self._io, self._spawn)
        )
        reply: asyncio.Future[Any] | None = None
        self.busy += 1
        try:
            worker.conn.send((fn, args, self.settings.cpu_seconds))
            reply = loop.run_in_executor(self._io, _read_reply, worker.conn)
            outcome = await self._reply(worker, reply)
        except BaseException as e:  # cancelled, over its time, or dead: never reused
            if isinstance(e, asyncio.CancelledError):
                self.outcomes["cancelled"] += 1
            worker.kill(reply)
            raise
        finally:
            self.busy -= 1
        self._idle.append(worker)
        return cast(T, self._result(outcome))

    async def _reply(self, worker: _Worker, reply: asyncio.Future[Any]) -> Any:
        try:
            async with asyncio.timeout(self.settings.wall_seconds):
                return await asyncio.shield(reply)
        except TimeoutError:
            self.outcomes["wall"] += 1
            raise FileTooCostly(
                f"the file took more than {self.settings.wall_seconds:g} s to read",
                param="file",
            ) from None
        except (EOFError, OSError):  # the process ended (killed, or over its CPU time)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._io, worker.process.join, 5)
            raise self._died(worker) from None

    def _result(self, outcome: object) -> Any:
        match outcome:
            case {"ok": value}:
                self.outcomes["ok"] += 1
                return value
            case {"refused": [int(status), str(kind), str(code), str(message), param]}:
                self.outcomes["refused"] += 1
                raise JobRefused(
                    status, kind, code, message, param if isinstance(param, str) else None
                )
            case {"memory": True}:
                self.outcomes["memory"] += 1
                raise FileTooCostly(
                    f"the file needs more than {self.settings.memory_mb} MB to read",
                    param="file",
                )
        self.outcomes["died"] += 1
        raise FileTooCostly("the file could not be read: its parser failed", param="file")

    def _died(self, worker: _Worker) -> ParleyError:
        code = worker.process.exitcode
        if code == -signal.SIGXCPU or code == -signal.SIGKILL:
            self.outcomes["cpu"] += 1
            return FileTooCostly(
                f"the file took more than {self.settings.cpu_seconds} s of CPU to read",
                param="file",
            )
        self.outcomes["died"] += 1
        log.error("a parsing process died (exit code %s)", code)
        return FileTooCostly("the file could not be read: its parser failed", param="file")

    def _semaphore(self) -> asyncio.Semaphore:
        if self._free is None:
            self._free = asyncio.Semaphore(self.settings.workers)
        return self._free

    def _spawn(self) -> _Worker:
        if self._ctx is None:
            self._ctx = multiprocessing.get_context("forkserver")
            self._ctx.set_forkserver_preload(PRELOAD)
        return _Worker(self._ctx, self.settings)

    async def close(self) -> None:
        for worker in self._idle:
            worker.kill()
        self._idle.clear()
        self._io.shutdown(wait=False, cancel_futures=True)
