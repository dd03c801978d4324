"""One OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, a hosted API) as an Engine.

``stream()`` POSTs ``{base_url}/chat/completions`` with ``stream: true`` and
``stream_options.include_usage`` over one pooled ``httpx.AsyncClient`` and turns the
server-sent chunks into deltas: one a content chunk, then a last one with the finish reason
and the token counts from the upstream's ``usage`` (when it sends none, the content chunks
counted). Keep-alive comments, other SSE fields and fields parley does not know (reasoning,
logprobs) are passed over.

Closing the stream, or ``abort()``, closes the upstream response: the server sees its client
leave and frees the slot. Failures are mapped for the run and the router:

* refused, unreachable, a 5xx / 429 / 408, a cut or silence before the first token:
  ``EngineUnavailable`` (retryable: nothing was produced);
* any other 4xx: ``UpstreamRejected`` (``ContextLengthExceeded`` when the prompt is too
  long) naming the upstream's own message;
* a malformed chunk, an error chunk, a cut or silence after the first token:
  ``UpstreamBroken`` (the run keeps the text it streamed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError

from parley.config import UpstreamSettings
from parley.engines.interface import (
    ChatMessage,
    ContextLengthExceeded,
    Delta,
    EngineError,
    EngineUnavailable,
    FinishReason,
    GenerationRequest,
    UpstreamBroken,
    UpstreamRejected,
)
from parley.observability import tracing
from parley.openai.protocol import DONE, ChatCompletionChunk, error_message

log = logging.getLogger(__name__)

_RETRYABLE_STATUS = frozenset({408, 425, 429})
_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}
_ERROR_BODY_BYTES = 4096


class _End:
    """The upstream response ended (EOF)."""


class _Abort:
    """``abort()`` was called."""


_Item = str | _End | _Abort | BaseException


@dataclass(slots=True)
class _Request:
    """One request in flight: the queue its lines arrive on, and whether it was aborted."""

    lines: asyncio.Queue[_Item] = field(default_factory=asyncio.Queue)
    aborted: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class _Tally:
    """What one answer has produced so far."""

    tokens: int = 0
    finish: FinishReason | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    done: bool = False  # [DONE] seen

    @property
    def started(self) -> bool:
        return self.tokens > 0


def estimate_prompt_tokens(messages: list[ChatMessage]) -> int:
    """A prompt's length without the model's tokenizer: about four characters a token, plus a
    few a message for the chat template. The upstream's ``usage`` replaces it once known."""
    return sum(len(m.content) // 4 + 4 for m in messages) + 2


class UpstreamEngine:
    def __init__(
        self,
        base_url: str,
        settings: UpstreamSettings,
        *,
        label: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.label = label or self.base_url
        self.settings = settings
        headers = {"Accept": "text/event-stream"}
        key = settings.resolved_api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(
                connect=settings.connect_timeout_seconds,
                read=None,  # the first-token and idle deadlines below bound reads
                write=settings.connect_timeout_seconds,
                pool=None,
            ),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            transport=transport,
        )
        self._requests: dict[str, _Request] = {}

    @property
    def in_flight(self) -> int:
        return len(self._requests)

    async def start(self) -> None:
        """Nothing runs in the background: connections open on demand."""

    def count_prompt_tokens(self, model: str, messages: list[ChatMessage]) -> int:
        return estimate_prompt_tokens(messages)

    def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        url = f"{self.base_url}/chat/completions"  # a span per request, its context sent on
        return tracing.upstream(self._stream(request), url=url, model=request.model)

    async def _stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        state = _Request()
        self._requests[request.request_id] = state
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.first_token_timeout_seconds
        response: httpx.Response | None = None
        pump: asyncio.Task[None] | None = None
        try:
            response = await self._open(request, state, deadline)
            if response is None:
                yield Delta("", 0, FinishReason.ABORT)
                return
            pump = asyncio.create_task(_pump(response, state.lines))
            async for delta in self._deltas(state, deadline):
                yield delta
        finally:
            self._requests.pop(request.request_id, None)
            if pump is not None:
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pump
            if response is not None:
                await response.aclose()  # the server sees us leave and frees the slot

    async def abort(self, request_id: str) -> None:
        state = self._requests.get(request_id)
        if state is not None:
            state.aborted.set()
            state.lines.put_nowait(_Abort())

    async def probe(self, path: str) -> bool:
        """Whether the server answers ``GET {base_url}{path}`` with a 2xx in time."""
        try:
            response = await self._client.get(path, timeout=self.settings.connect_timeout_seconds)
        except httpx.HTTPError:
            return False
        return response.is_success

    async def close(self) -> None:
        for state in self._requests.values():
            state.aborted.set()
            state.lines.put_nowait(_Abort())
        await self._client.aclose()

    # -- the request ----------------------------------------------------------------------

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p != 1.0:
            body["top_p"] = request.top_p
        if request.seed is not None:
            body["seed"] = request.seed
        if request.stop:
            body["stop"] = list(request.stop)
        return body

    async def _open(
        self, request: GenerationRequest, state: _Request, deadline: float
    ) -> httpx.Response | None:
        """The upstream's 200 response, ready to stream; None if aborted meanwhile."""
        built = self._client.build_request("POST", "/chat/completions", json=self._body(request))
        tracing.inject(built.headers)  # traceparent: the upstream joins the run's trace
        sending = asyncio.ensure_future(self._client.send(built, stream=True))
        aborting = asyncio.ensure_future(state.aborted.wait())
        timeout = max(0.0, deadline - asyncio.get_running_loop().time())
        try:
            done, _ = await asyncio.wait(
                {sending, aborting}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except BaseException:  # cancelled while waiting: nobody will read this response
            await _discard(sending)
            raise
        finally:
            aborting.cancel()
        if sending not in done:
            await _discard(sending)
            if state.aborted.is_set():
                return None
            raise EngineUnavailable(
                f"{self.label} did not answer within "
                f"{self.settings.first_token_timeout_seconds:g} s"
            )
        try:
            response = sending.result()
        except httpx.HTTPError as e:
            raise EngineUnavailable(f"{self.label} is unreachable: {_describe(e)}") from e
        tracing.set_attribute(tracing.HTTP_STATUS, response.status_code)
        if response.status_code != 200:
            raise await self._refusal(response)
        return response

    async def _refusal(self, response: httpx.Response) -> EngineError:
        """The error a non-200 answer maps to, naming the upstream's message."""
        try:
            raw = b""
            async for part in response.aiter_bytes():
                raw += part
                if len(raw) >= _ERROR_BODY_BYTES:
                    break
        except httpx.HTTPError:
            raw = b""
        finally:
            await response.aclose()
        status = response.status_code
        message = _message_of(raw) or response.reason_phrase or "no reason given"
        said = f"{self.label} answered {status}: {message}"
        if status >= 500 or status in _RETRYABLE_STATUS:
            return EngineUnavailable(said)
        if _is_context_length(message, raw):
            return ContextLengthExceeded(f"the upstream refused the prompt: {message}")
        return UpstreamRejected(f"the upstream refused the request ({status}): {message}")

    # -- the answer -----------------------------------------------------------------------

    async def _deltas(self, state: _Request, deadline: float) -> AsyncIterator[Delta]:
        tally = _Tally()
        loop = asyncio.get_running_loop()
        while not tally.done:
            wait = (
                self.settings.idle_timeout_seconds
                if tally.started
                else max(0.0, deadline - loop.time())
            )
            try:
                async with asyncio.timeout(wait):
                    item = await state.lines.get()
            except TimeoutError:
                raise self._silence(tally) from None
            if isinstance(item, _Abort):
                yield Delta("", 0, FinishReason.ABORT, tally.prompt_tokens)
                return
            if isinstance(item, _End):
                break
            if isinstance(item, BaseException):
                raise self._cut(tally, _describe(item)) from item
            for delta in self._read_line(item, tally):
                yield delta
        if tally.finish is None and not tally.done:
            raise self._cut(tally, "the connection closed")
        yield self._last(tally)

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
        out: list[Delta] = []
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            text = choice.delta.content or ""
            if text:
                tally.tokens += 1
                out.append(Delta(text, 1))
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
        return Delta("", extra, tally.finish or FinishReason.STOP, tally.prompt_tokens)

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


async def _discard(sending: asyncio.Future[httpx.Response]) -> None:
    """Stop a request whose response nobody will read, closing it if it came meanwhile."""
    sending.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        late = await sending
        await late.aclose()


async def _pump(response: httpx.Response, lines: asyncio.Queue[_Item]) -> None:
    """Move the response's lines onto the queue, then its end (or what broke it)."""
    try:
        async for line in response.aiter_lines():
            lines.put_nowait(line)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # httpx.HTTPError, or a decoding error of a broken body
        lines.put_nowait(e)
        return
    lines.put_nowait(_End())


def _message_of(raw: bytes) -> str | None:
    text = raw.decode("utf-8", "replace").strip()
    try:
        said = error_message(json.loads(text))
    except json.JSONDecodeError:
        said = None
    if said:
        return said[:500]
    return text[:200] or None


def _is_context_length(message: str, raw: bytes) -> bool:
    lowered = (message + raw.decode("utf-8", "replace")).lower()
    return (
        "context_length_exceeded" in lowered
        or "context length" in lowered
        or ("maximum context" in lowered)
    )


def _describe(e: BaseException) -> str:
    """What went wrong, for a run's error: the exception's kind and its short message."""
    detail = str(e).strip()
    return f"{type(e).__name__}: {detail}" if detail else type(e).__name__
