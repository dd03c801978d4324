"""An answer under output moderation: the engine's stream, with nothing released before the
run's tier's classifiers have approved it.

Two layers, each only when the tier uses it:

* the inline rule sets (``_scanned``): each piece is scanned as it comes and released at
  once, except the text a blocked phrase could still be starting in (held until the next
  piece decides it): no window, nothing added to the time to first token;
* the remote classifiers (``_windowed``): what the scans released is gathered into windows
  of ``window_tokens``; a full window (with the window before it as context) goes to the
  classifiers while the engine goes on into the next one, and is released once approved.
  The client lags the engine by one window; if the classifiers fall behind, reading from
  the engine waits rather than hold back more than the window under check and the next.

A refusal aborts the engine request at once and raises ``OutputRefused``: the worker ends the
run ``rejected`` with an ``error`` event, keeping the text released so far (everything up to
the last approved window); the text held back is dropped and never reaches the stream. An
answer stopped by its user (an ``abort`` finish) drops what was held back, unchecked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

from parley.domain import RunSource
from parley.engines.interface import Delta, FinishReason, GenerationRequest, joined_deltas
from parley.safety.interface import Stage
from parley.safety.moderator import Moderator, OutputPolicy, Ruling
from parley.store.schema import Run

Abort = Callable[[str], Awaitable[None]]


class OutputRefused(Exception):
    """An answer stopped by moderation. ``generated``: the tokens the engine produced for
    it (what the run is charged), released or not."""

    def __init__(self, ruling: Ruling, generated: int) -> None:
        self.ruling = ruling
        self.code = ruling.code
        self.message = ruling.message(Stage.OUTPUT)
        self.generated = generated
        super().__init__(self.message)


def moderated(
    moderator: Moderator | None,
    run: Run,
    request: GenerationRequest,
    stream: AsyncIterator[Delta],
    abort: Abort,
) -> AsyncIterator[Delta]:
    """``stream`` under the output moderation of ``run``'s tier (itself when there is none:
    no tier classifiers, or a summary run, which no user reads as it streams)."""
    if moderator is None or run.source is RunSource.SUMMARY:
        return stream
    asked = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    policy = moderator.output_policy(run.tier, asked)
    if policy is None:
        return stream
    return Moderated(policy, lambda: abort(request.request_id)).stream(stream)


class Moderated:
    """One answer through its ``OutputPolicy``."""

    def __init__(self, policy: OutputPolicy, abort: Callable[[], Awaitable[None]]) -> None:
        self._policy = policy
        self._abort = abort
        self.generated = 0  # tokens the engine produced

    def stream(self, inner: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
        stream = self._scanned(inner) if self._policy.scans else inner
        return (
            self._windowed(stream, counted=bool(self._policy.scans))
            if self._policy.remote
            else stream
        )

    async def _refuse(self, ruling: Ruling) -> OutputRefused:
        await self._abort()  # the engine stops now, not when the stream is closed
        return OutputRefused(ruling, self.generated)

    async def _scanned(self, inner: AsyncIterator[Delta]) -> AsyncGenerator[Delta, None]:
        policy = self._policy
        held = ""  # text scanned but not released: a blocked phrase could be starting in it
        held_tokens = 0
        released = 0  # characters of the answer released
        try:
            async for delta in inner:
                self.generated += delta.tokens
                if delta.finish_reason is FinishReason.ABORT:
                    yield Delta(
                        "", 0, delta.finish_reason, delta.prompt_tokens, delta.cached_tokens
                    )
                    return
                said = policy.scan(delta.text, final=delta.finish_reason is not None)
                if isinstance(said, Ruling):
                    raise await self._refuse(said)
                if not held and said == released + len(delta.text):
                    released = said
                    yield delta  # the usual case: all of it, as it came
                    continue
                held += delta.text
                held_tokens += delta.tokens
                free, held = held[: said - released], held[said - released :]
                tokens = 0 if held else held_tokens
                held_tokens -= tokens
                released = said
                yield replace(delta, text=free, tokens=tokens)
            policy.ended()
        finally:
            await inner.aclose()  # type: ignore[attr-defined]

    async def _windowed(
        self, inner: AsyncIterator[Delta], *, counted: bool
    ) -> AsyncGenerator[Delta, None]:
        reader = _Reader(inner)
        windows = _Windows(self._policy)
        try:
            while not windows.over:
                windows.start_check()
                if windows.checking is None and windows.reading:
                    read: Delta | None = await reader.read()  # no check out: just read on
                elif (read := await self._either(reader, windows)) is _CHECKED:
                    approved = windows.judged()
                    if isinstance(approved, Ruling):
                        raise await self._refuse(approved)
                    yield approved
                    continue
                if read is not _NOTHING:
                    if read is not None and not counted:
                        self.generated += read.tokens
                    for out in windows.take(read):
                        yield out
            if windows.finish is not None:
                yield windows.finish
        finally:
            await windows.cancel()
            await reader.close()

    @staticmethod
    async def _either(reader: _Reader, windows: _Windows) -> Any:
        """Wait for the check out, and for the engine's next delta unless a window is
        already waiting for that check: ``_CHECKED`` when the check is in (it is seen
        first), else what the engine gave (``_NOTHING``: neither, the answer is over)."""
        waits: set[asyncio.Future[Any]] = set()
        if windows.reading:
            waits.add(reader.next())
        if windows.checking is not None:
            waits.add(windows.checking)
        if not waits:
            windows.over = True
            return _NOTHING
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if windows.checking is not None and windows.checking in done:
            return _CHECKED
        return reader.take()


_CHECKED = object()  # a window's check is in
_NOTHING = object()  # nothing to wait for


class _Windows:
    """The remote classifiers' windows of one answer: gathered, checked, released."""

    def __init__(self, policy: OutputPolicy) -> None:
        self._policy = policy
        self._filling: list[Delta] = []  # released by the scans, not yet sent for checking
        self._filled = 0
        self.checking: asyncio.Task[Ruling] | None = None
        self._under_check = Delta("", 0)
        self._context = ""  # the last window approved
        self._finish: Delta | None = None
        self._ended = False
        self.over = False

    @property
    def reading(self) -> bool:
        """Whether to read on: not past the end, nor a window ahead of a check."""
        return not self._ended and (
            self.checking is None or self._filled < self._policy.window_tokens
        )

    def start_check(self) -> None:
        if self.checking is not None:
            return
        full = self._filled >= self._policy.window_tokens
        if not (full or (self._ended and self._filling)):
            self.over = self._ended  # nothing left to check: the end may go out
            return
        self._under_check = joined_deltas(self._filling)
        text = self._under_check.text
        self._filling, self._filled = [], 0
        self.checking = asyncio.create_task(self._policy.window(self._context + text))

    def judged(self) -> Delta | Ruling:
        assert self.checking is not None
        ruling, self.checking = self.checking.result(), None
        if ruling.blocked:
            return ruling
        self._context = self._under_check.text
        return self._under_check

    def take(self, delta: Delta | None) -> list[Delta]:
        """A delta read (None: the stream ended): what goes out at once (the prompt's
        counts; an abort's end), the rest gathered."""
        out: list[Delta] = []
        if delta is None:
            self._ended = True
            return out
        if delta.prompt_tokens is not None or delta.cached_tokens is not None:
            out.append(Delta("", 0, None, delta.prompt_tokens, delta.cached_tokens))
        if delta.finish_reason is FinishReason.ABORT:  # stopped: what is held goes unchecked
            self._ended, self.over = True, True
            return [*out, Delta("", 0, delta.finish_reason)]
        if delta.text or delta.tokens:
            # its counts and end went out or are kept apart: the window holds what it says
            self._filling.append(
                replace(delta, finish_reason=None, prompt_tokens=None, cached_tokens=None)
            )
            self._filled += delta.tokens
        if delta.finish_reason is not None:
            self._finish, self._ended = Delta("", 0, delta.finish_reason), True
        return out

    @property
    def finish(self) -> Delta | None:
        return self._finish

    async def cancel(self) -> None:
        if self.checking is not None:
            self.checking.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.checking


class _Reader:
    """An engine stream read one delta at a time as a task, so a check can be waited on
    beside it."""

    def __init__(self, inner: AsyncIterator[Delta]) -> None:
        self._inner = inner
        self.pending: asyncio.Task[Delta | None] | None = None

    def next(self) -> asyncio.Task[Delta | None]:
        if self.pending is None:
            self.pending = asyncio.create_task(self._step())
        return self.pending

    async def _step(self) -> Delta | None:
        try:
            return await anext(self._inner)
        except StopAsyncIteration:
            return None

    def take(self) -> Delta | None:
        assert self.pending is not None
        task, self.pending = self.pending, None
        return task.result()

    async def read(self) -> Delta | None:
        """The next delta, awaited here (no task): the one already asked for, if any."""
        if self.pending is None:
            return await self._step()
        task, self.pending = self.pending, None
        return await task

    async def close(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.pending
        await self._inner.aclose()  # type: ignore[attr-defined]
