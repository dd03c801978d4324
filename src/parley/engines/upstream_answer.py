"""Reading an OpenAI-compatible server's streamed answer: its SSE lines, moved off the
response by a pump task, become deltas, with the upstream's failures mapped for the run.

Under load many chunks arrive between two turns of the reader: all that have arrived are
read at once and given as ONE delta (its text the chunks' texts, its token count theirs),
so the worker appends, and a relay writes, once per arrival rather than once per token.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from parley.engines.interface import (
    Delta,
    EngineError,
    EngineUnavailable,
    FinishReason,
    TokenLogprob,
    TopLogprob,
    UpstreamBroken,
    joined_deltas,
)
from parley.engines.settings import UpstreamSettings
from parley.engines.tools import ToolCallDelta
from parley.openai.protocol import (
    DONE,
    ChatCompletionChunk,
    ChoiceLogprobs,
    ChunkDelta,
    error_message,
)

_FINISH = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "abort": FinishReason.ABORT,
    "tool_calls": FinishReason.TOOL_CALLS,
}


class End:
    """The upstream response ended (EOF)."""


class Abort:
    """``abort()`` was called."""


Item = str | End | Abort | BaseException


@dataclass(slots=True)
class Request:
    """One request in flight: the queue its lines arrive on, and whether it was aborted."""

    lines: asyncio.Queue[Item] = field(default_factory=asyncio.Queue)
    aborted: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class _Tally:
    """What one answer has produced so far."""

    tokens: int = 0
    finish: FinishReason | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # the upstream's prefix cache hits, if it says
    done: bool = False  # [DONE] seen

    @property
    def started(self) -> bool:
        return self.tokens > 0


class AnswerReader:
    """One upstream's answers read into deltas; ``label`` names the upstream in errors."""

    def __init__(self, label: str, settings: UpstreamSettings) -> None:
        self.label = label
        self.settings = settings

    async def deltas(self, state: Request, deadline: float) -> AsyncIterator[Delta]:
        """The answer's deltas: one for all the content that arrived since the last was
        taken (under load, many chunks at once; each chunk still counts its token)."""
        tally = _Tally()
        while not tally.done:
            items = await self._arrived(state, tally, deadline)
            delta, last = self._read_lines(items, tally)
            if delta is not None:
                yield delta
            if isinstance(last, Abort):
                yield Delta("", 0, FinishReason.ABORT, tally.prompt_tokens)
                return
            if isinstance(last, End):
                break
            if isinstance(last, EngineError):
                raise last
            if isinstance(last, BaseException):
                raise self._cut(tally, describe(last)) from last
        if tally.finish is None and not tally.done:
            raise self._cut(tally, "the connection closed")
        yield self._last(tally)

    async def _arrived(self, state: Request, tally: _Tally, deadline: float) -> list[Item]:
        """The next item (waited for within the timeouts) and every item queued behind it."""
        wait = (
            self.settings.idle_timeout_seconds
            if tally.started
            else max(0.0, deadline - asyncio.get_running_loop().time())
        )
        try:
            async with asyncio.timeout(wait):
                first = await state.lines.get()
        except TimeoutError:
            raise self._silence(tally) from None
        return [first, *(state.lines.get_nowait() for _ in range(state.lines.qsize()))]

    def _read_lines(self, items: list[Item], tally: _Tally) -> tuple[Delta | None, Item | None]:
        """The content of the lines before the first item that is not a line (or a line
        that is broken), as one delta, and that item (the end, an abort, what broke the
        stream, or the line's EngineError), if any."""
        read: list[Delta] = []
        for item in items:
            if not isinstance(item, str):
                return joined(read), item
            if tally.done:
                continue  # nothing after [DONE] counts
            try:
                read.extend(self._read_line(item, tally))
            except EngineError as e:  # what came before the broken line is still sent
                return joined(read), e
        return joined(read), None

    def _read_line(self, line: str, tally: _Tally) -> list[Delta]:
        """The deltas of one SSE line (none for comments, other fields and bookkeeping)."""
        if not line.startswith("data:"):
            return []  # a keep-alive comment, a blank line, event:/id:/retry:
        data = line[5:].strip()
        if data == DONE:
            tally.done = True
            return []
        chunk = self._parse(data, tally)
        if chunk.usage is not None:
            tally.prompt_tokens = chunk.usage.prompt_tokens
            tally.completion_tokens = chunk.usage.completion_tokens
            details = chunk.usage.prompt_tokens_details
            tally.cached_tokens = details.cached_tokens if details is not None else None
        out: list[Delta] = []
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = _delta(choice.delta, choice.logprobs)
            if delta is not None:  # the first of reasoning, text or a call starts the answer
                tally.tokens += 1
                out.append(delta)
            if choice.finish_reason:
                tally.finish = _FINISH.get(choice.finish_reason, FinishReason.STOP)
        return out

    def _parse(self, data: str, tally: _Tally) -> ChatCompletionChunk:
        try:
            body = json.loads(data)
        except json.JSONDecodeError:
            raise self._broken(f"sent a malformed chunk: {data[:120]!r}") from None
        if isinstance(body, dict) and "error" in body:
            said = error_message(body) or "an error"
            if tally.started:
                raise UpstreamBroken(f"{self.label} failed mid-answer: {said}")
            raise EngineUnavailable(f"{self.label} failed: {said}")
        try:
            return ChatCompletionChunk.model_validate(body)
        except ValidationError:
            raise self._broken(f"sent a chunk of the wrong shape: {data[:120]!r}") from None

    def _last(self, tally: _Tally) -> Delta:
        """The closing delta: the finish reason, and the tokens the upstream counted beyond
        the content chunks (one chunk may carry several tokens)."""
        extra = 0
        if tally.completion_tokens is not None:
            extra = max(0, tally.completion_tokens - tally.tokens)
        finish = tally.finish or FinishReason.STOP
        return Delta("", extra, finish, tally.prompt_tokens, tally.cached_tokens)

    def _broken(self, what: str) -> EngineError:
        return UpstreamBroken(f"{self.label} {what}")

    def _cut(self, tally: _Tally, why: str) -> EngineError:
        if tally.started:
            return UpstreamBroken(f"{self.label} broke off mid-answer: {why}")
        return EngineUnavailable(f"{self.label} ended before the first token: {why}")

    def _silence(self, tally: _Tally) -> EngineError:
        if tally.started:
            return UpstreamBroken(
                f"{self.label} went silent for {self.settings.idle_timeout_seconds:g} s mid-answer"
            )
        return EngineUnavailable(
            f"{self.label} sent no token within {self.settings.first_token_timeout_seconds:g} s"
        )


def _delta(chunk: ChunkDelta, logprobs: ChoiceLogprobs | None = None) -> Delta | None:
    """One chunk's content, reasoning and call fragments (and its tokens' log probabilities,
    when asked for) as a delta of one token; None when it carries none (a role-only chunk,
    a finish or usage chunk)."""
    calls = tuple(
        ToolCallDelta(
            c.index,
            c.id,
            c.function.name if c.function else None,
            (c.function.arguments or "") if c.function else "",
        )
        for c in chunk.tool_calls or ()
    )
    text, reasoning = chunk.content or "", chunk.reasoning_text
    if not (text or reasoning or calls):
        return None
    probs = tuple(_logprob(p) for p in (logprobs.content or ())) if logprobs else ()
    return Delta(text, 1, reasoning=reasoning, tool_calls=calls, logprobs=probs)


def _logprob(item: dict[str, Any]) -> TokenLogprob:
    """One of a server's ``logprobs.content`` items (lenient: what it leaves out is empty)."""
    top = tuple(
        TopLogprob(
            str(t.get("token", "")), float(t.get("logprob", 0.0)), tuple(t.get("bytes") or ())
        )
        for t in item.get("top_logprobs") or ()
        if isinstance(t, dict)
    )
    raw = tuple(item.get("bytes") or ())
    return TokenLogprob(str(item.get("token", "")), float(item.get("logprob", 0.0)), raw, top)


def joined(read: list[Delta]) -> Delta | None:
    """Several deltas that arrived together as one (``interface.joined``); None for none."""
    return joined_deltas(read) if read else None


async def pump_lines(response: httpx.Response, lines: asyncio.Queue[Item]) -> None:
    """Move the response's lines onto the queue, then its end (or what broke it). Lines
    are split here, on the bytes (httpx's ``aiter_lines`` is three more generators a chunk,
    and a chunk is a token); a line is decoded once whole, so no character is cut."""
    try:
        rest = b""
        async for piece in response.aiter_bytes():
            parts = (rest + piece).splitlines(keepends=True)
            rest = parts.pop() if parts and not parts[-1].endswith((b"\n", b"\r")) else b""
            for part in parts:
                lines.put_nowait(part.rstrip(b"\r\n").decode("utf-8", "replace"))
        if rest:
            lines.put_nowait(rest.decode("utf-8", "replace"))
    except asyncio.CancelledError:
        raise
    except Exception as e:  # httpx.HTTPError, or a decoding error of a broken body
        lines.put_nowait(e)
        return
    lines.put_nowait(End())


def describe(e: BaseException) -> str:
    """What went wrong, for a run's error: the exception's kind and its short message."""
    detail = str(e).strip()
    return f"{type(e).__name__}: {detail}" if detail else type(e).__name__
