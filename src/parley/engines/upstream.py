"""One OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, a hosted API) as an Engine.

``stream()`` POSTs ``{base_url}/chat/completions`` with ``stream: true`` and
``stream_options.include_usage`` over one pooled ``httpx.AsyncClient`` (its bytes carried by
aiohttp: ``upstream_transport.py``) and turns the
server-sent chunks into deltas (``upstream_answer.AnswerReader``): one for the content that
arrived together (one chunk when they come slowly, many under load), then a last one with the
finish reason and the token counts from the upstream's ``usage`` (when it sends none, the
content chunks counted). Keep-alive comments, other SSE fields and fields parley does not
know (reasoning, logprobs) are passed over. A whole answer's connection goes back to the
pool for the next request (keep-alive).

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
from typing import Any

import httpx

from parley.engines.estimate import estimate
from parley.engines.interface import (
    ChatMessage,
    ContextLengthExceeded,
    Delta,
    EngineError,
    EngineState,
    EngineUnavailable,
    FinishReason,
    GenerationRequest,
    UpstreamRejected,
)
from parley.engines.settings import UpstreamSettings
from parley.engines.upstream_answer import Abort, AnswerReader, Request, describe, pump_lines
from parley.engines.upstream_transport import AiohttpTransport
from parley.observability import tracing
from parley.openai.protocol import error_message

log = logging.getLogger(__name__)

_RETRYABLE_STATUS = frozenset({408, 425, 429})
_ERROR_BODY_BYTES = 4096


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
            transport=transport if transport is not None else AiohttpTransport(),
        )
        self._requests: dict[str, Request] = {}
        self._reader = AnswerReader(self.label, settings)

    @property
    def in_flight(self) -> int:
        return len(self._requests)

    async def start(self) -> None:
        """Nothing runs in the background: connections open on demand."""

    def count_prompt_tokens(self, model: str, messages: list[ChatMessage]) -> int:
        return estimate(messages)

    def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        url = f"{self.base_url}/chat/completions"  # a span per request, its context sent on
        return tracing.upstream(self._stream(request), url=url, model=request.model)

    async def _stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        state = Request()
        self._requests[request.request_id] = state
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.first_token_timeout_seconds
        response: httpx.Response | None = None
        pump: asyncio.Task[None] | None = None
        answered = False  # the last delta (with its finish reason) was given
        try:
            response = await self._open(request, state, deadline)
            if response is None:
                yield Delta("", 0, FinishReason.ABORT)
                return
            pump = asyncio.create_task(pump_lines(response, state.lines))
            async for delta in self._reader.deltas(state, deadline):
                # the upstream's own end (ours, ABORT, leaves its body unread)
                answered = delta.finish_reason not in (None, FinishReason.ABORT)
                yield delta
        finally:
            self._requests.pop(request.request_id, None)
            if pump is not None:
                await self._stop_pump(pump, answered=answered)
            if response is not None:
                await response.aclose()  # the server sees us leave and frees the slot

    async def _stop_pump(self, pump: asyncio.Task[None], *, answered: bool) -> None:
        """Stop reading. A whole answer's pump is let finish: it is returning the connection
        to the pool, and cancelled there it would leave it in use for ever (one socket
        leaked per request); any other is cancelled, and its connection closed."""
        try:
            if answered and not pump.done():
                await asyncio.wait({pump}, timeout=self.settings.connect_timeout_seconds)
        finally:  # (cancelled while waiting: the pump is not left behind)
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump

    async def abort(self, request_id: str) -> None:
        state = self._requests.get(request_id)
        if state is not None:
            state.aborted.set()
            state.lines.put_nowait(Abort())

    async def probe(self, path: str) -> bool:
        """Whether the server answers ``GET {base_url}{path}`` with a 2xx in time."""
        try:
            response = await self._client.get(path, timeout=self.settings.connect_timeout_seconds)
        except httpx.HTTPError:
            return False
        return response.is_success

    def state(self) -> EngineState:
        return EngineState.READY  # the router judges a server's health by its probes

    async def close(self) -> None:
        for state in self._requests.values():
            state.aborted.set()
            state.lines.put_nowait(Abort())
        await self._client.aclose()

    # -- the request ----------------------------------------------------------------------

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [_message(m) for m in request.messages],
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        body.update(request.sampling.model_dump(exclude_defaults=True))  # what is set
        body.update(request.output.wire())  # tools, response format, reasoning effort
        if request.continue_final:  # (vLLM's and SGLang's names; llama.cpp's server too)
            body.update(continue_final_message=True, add_generation_prompt=False)
        return body

    async def _open(
        self, request: GenerationRequest, state: Request, deadline: float
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
            raise EngineUnavailable(f"{self.label} is unreachable: {describe(e)}") from e
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


def _message(m: ChatMessage) -> dict[str, Any]:
    """A message as OpenAI's wire has it: an assistant's calls, a tool's answer."""
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [call.wire() for call in m.tool_calls]
        out["content"] = m.content or None
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


async def _discard(sending: asyncio.Future[httpx.Response]) -> None:
    """Stop a request whose response nobody will read, closing it if it came meanwhile."""
    sending.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        late = await sending
        await late.aclose()


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
