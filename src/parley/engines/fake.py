"""The fake engine: deterministic text at a configured pace, with a fixed number of slots.

The workhorse of tests and load benchmarks. Output depends only on the request's
messages (and max_tokens), so a test can predict it: pseudo-random words seeded by the
messages, or, when the newest message starts with ``/echo ``, the rest of that message
word by word (how browser tests make the "model" say markdown or markup), or a scripted
answer: the first of ``answers`` whose pattern the newest message matches, else ``answer``
when set (how ``parley engine serve --engine fake`` plays a guard model answering
``unsafe\nS1``). Offered tools, a newest user message of ``/call name {json}`` lines calls
them (each line a call, all at once), once (``/call-forever``: at every step while tools are
callable); given their results, it says them back ("Tools said: …"). A slot is held
from the start of a stream until it ends, is aborted, or its iterator is closed. Like every
engine, an aborted stream ends with a delta whose finish reason is ``abort``.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from parley.deadlines import SharedDeadlines
from parley.engines.interface import (
    ChatMessage,
    ContextLengthExceeded,
    Delta,
    EngineState,
    FinishReason,
    GenerationRequest,
)
from parley.engines.prompt_counts import WordCount
from parley.engines.tools import ToolCallDelta

FAKE_MODEL = "parley-fake"
ECHO_PREFIX = "/echo "
CALL_PREFIX, CALL_FOREVER_PREFIX = "/call ", "/call-forever "

_WORDS = (
    "the quick brown fox jumps over a lazy dog while seven bright stars hum softly across "
    "quiet hills and every river sings of distant cities built from glass light paper stone "
    "rain music memory"
).split(" ")


@dataclass(frozen=True, slots=True)
class FakeEngineConfig:
    time_to_first_token: float = 0.05
    inter_token_latency: float = 0.02
    output_tokens: int = 32
    slots: int = 8
    context_window: int = 8_192  # a prompt that fills it is refused, as a real engine does
    answers: tuple[tuple[str, str], ...] = ()  # (pattern searched in the newest message, answer)
    answer: str | None = None  # the answer when no pattern of ``answers`` matches


def fake_text(
    messages: list[ChatMessage],
    n_tokens: int,
    config: FakeEngineConfig | None = None,
    *,
    going_on: bool = False,
) -> list[str]:
    """The tokens the fake engine answers with, at most ``n_tokens`` of them (``going_on``:
    after an answer begun, so its first word too has a space before it)."""
    echo = _tools_said(messages) or _scripted(messages, config) or _echo(messages)
    if echo is not None:
        return echo[:n_tokens]
    seed = hashlib.sha256("\x1e".join(m.content for m in messages).encode()).digest()
    rng = random.Random(seed)
    return [(" " if i or going_on else "") + rng.choice(_WORDS) for i in range(n_tokens)]


def _echo(messages: list[ChatMessage]) -> list[str] | None:
    """The text after ``/echo ``: one token a word, with the whitespace before it."""
    if not messages or not messages[-1].content.startswith(ECHO_PREFIX):
        return None
    return re.findall(r"\s*\S+", messages[-1].content[len(ECHO_PREFIX) :])


def _scripted(messages: list[ChatMessage], config: FakeEngineConfig | None) -> list[str] | None:
    """The scripted answer for these messages, as tokens (one a word, whitespace before it)."""
    if config is None or not messages or not (config.answers or config.answer is not None):
        return None
    newest = messages[-1].content
    said = next((a for p, a in config.answers if re.search(p, newest)), config.answer)
    return None if said is None else re.findall(r"\s*\S+", said)


def _tools_said(messages: list[ChatMessage]) -> list[str] | None:
    """After tool results: what they said (each result's start), as tokens."""
    if not messages or messages[-1].role != "tool":
        return None
    results = []
    for m in reversed(messages):
        if m.role != "tool":
            break
        results.append(" ".join(m.content.split())[:240])
    return re.findall(r"\s*\S+", "Tools said: " + " | ".join(reversed(results)))


def scripted_calls(request: GenerationRequest) -> tuple[ToolCallDelta, ...]:
    """The calls a ``/call`` message scripts, when tools are offered and callable."""
    tools = request.output.tools
    if tools is None or tools.choice == "none":
        return ()
    user = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    forever = user.startswith(CALL_FOREVER_PREFIX)
    if not forever and (not user.startswith(CALL_PREFIX) or request.messages[-1].role == "tool"):
        return ()
    done = sum(1 for m in request.messages if m.role == "tool")
    lines = user.split(" ", 1)[1].strip().splitlines()
    calls = []
    for i, line in enumerate(line for line in lines if line.strip()):
        name, _, arguments = line.strip().partition(" ")
        calls.append(ToolCallDelta(i, f"call_fake_{done}_{i}", name, arguments.strip() or "{}"))
    return tuple(calls)


def _answer_length(messages: list[ChatMessage], config: FakeEngineConfig) -> int:
    echo = _tools_said(messages) or _scripted(messages, config) or _echo(messages)
    return config.output_tokens if echo is None else len(echo)


class FakeEngine:
    def __init__(self, config: FakeEngineConfig | None = None) -> None:
        self.config = config or FakeEngineConfig()
        self._slots = asyncio.Semaphore(self.config.slots)
        self._active: dict[str, asyncio.Event] = {}
        self._ticks = _Ticks()
        self.started = 0

    @property
    def busy_slots(self) -> int:
        return len(self._active)

    def count_prompt_tokens(self, model: str, messages: list[ChatMessage]) -> int:
        return WordCount()(messages)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        prompt = self._prompt_within_window(request)
        await self._slots.acquire()
        aborted = asyncio.Event()
        self._active[request.request_id] = aborted
        self.started += 1
        try:
            full = _answer_length(request.messages, self.config)
            n = min(full, request.max_tokens)
            tokens = fake_text(request.messages, n, self.config, going_on=request.continue_final)
            if await _sleep_unless(aborted, self.config.time_to_first_token):
                yield Delta("", 0, FinishReason.ABORT, prompt)
                return
            if calls := scripted_calls(request):
                yield Delta("", len(calls), FinishReason.TOOL_CALLS, prompt, tool_calls=calls)
                return
            # the tokens on a schedule (first + i * latency), as an engine's come, however
            # long the consumer takes with each: a slow one falls behind, it does not slow
            # the engine down (one generator: no layer per token around this loop)
            end = FinishReason.LENGTH if full > request.max_tokens else FinishReason.STOP
            last, loop = len(tokens) - 1, asyncio.get_running_loop()
            due = loop.time()
            for i, token in enumerate(tokens):
                if i:
                    due += self.config.inter_token_latency
                    if await self._ticks.sleep_unless(aborted, due):
                        yield Delta("", 0, FinishReason.ABORT)
                        return
                yield Delta(token, 1, end if i == last else None, None if i else prompt)
            if not tokens:
                yield Delta("", 0, FinishReason.LENGTH, prompt)
        finally:
            self._active.pop(request.request_id, None)
            self._slots.release()

    def _prompt_within_window(self, request: GenerationRequest) -> int:
        prompt = self.count_prompt_tokens(request.model, request.messages)
        if prompt >= self.config.context_window:
            raise ContextLengthExceeded(
                f"the prompt is {prompt} tokens; the fake model reads at most "
                f"{self.config.context_window} tokens (its context window)"
            )
        return prompt

    async def start(self) -> None:
        """Nothing runs in the background until the first request."""

    async def abort(self, request_id: str) -> None:
        event = self._active.get(request_id)
        if event is not None:
            event.set()

    def state(self) -> EngineState:
        return EngineState.READY

    async def close(self) -> None:
        for event in self._active.values():
            event.set()


# Pauses up to this long are plain sleeps (cheap); an abort lands at their end.
_SHORT_PAUSE = 0.1


async def _sleep_unless(aborted: asyncio.Event, seconds: float) -> bool:
    """Sleep; True if aborted meanwhile (at once for long pauses, at their end for short)."""
    if aborted.is_set():
        return True
    if seconds <= 0:
        return False
    if seconds <= _SHORT_PAUSE:
        await asyncio.sleep(seconds)
        return aborted.is_set()
    try:
        async with asyncio.timeout(seconds):
            await aborted.wait()
    except TimeoutError:
        return False
    return True


_TICK = 0.001  # seconds: the streams' tokens due within one tick are woken together


class _Ticks:
    """The streams' next tokens, woken a tick at a time: one timer per tick for every stream
    due in it, as a real engine's step gives every running sequence its token at once (a
    timer per token per stream was the fake engine's own share of a benchmark's CPU)."""

    def __init__(self) -> None:
        self._due: SharedDeadlines[None] = SharedDeadlines(_TICK, None)

    async def sleep_unless(self, aborted: asyncio.Event, due: float) -> bool:
        """``_sleep_unless`` until the loop's time ``due`` (at most a tick later)."""
        loop = asyncio.get_running_loop()
        seconds = due - loop.time()
        if seconds > _SHORT_PAUSE or aborted.is_set() or seconds <= 0:
            return await _sleep_unless(aborted, seconds)
        waiter: asyncio.Future[None] = loop.create_future()
        tick = self._due.add(waiter, due)
        try:
            await waiter
        finally:
            self._due.discard(tick, waiter)
        return aborted.is_set()
