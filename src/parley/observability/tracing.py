"""OpenTelemetry traces: one trace from the HTTP request through the queue to the engine.

Off by default: ``configure`` (by the ``parley`` command at start-up, never at import)
installs an SDK tracer provider only when an OTLP endpoint is configured or an exporter is
handed in (tests); else the tracer is the API's no-op one, the edge scans the headers once,
and engine streams are not wrapped. The spans: ``{METHOD} {route}`` (server: the caller's
``traceparent`` honoured) → ``run.submit`` (its context stored with the run) →
``run.execute`` (in whichever worker claims the run) → ``engine.generate`` →
``upstream.chat_completions`` (its context sent on). Off, a caller's ``traceparent`` still
passes through (stored, in the worker's log lines, sent upstream), unrecorded.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
    MutableMapping,
)
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NoOpTracer, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from parley.engines.interface import Delta
    from parley.observability.settings import ObservabilitySettings as Seen
    from parley.store.schema import Run

# -- names: every span, event and attribute parley records ---------------------------------

SERVICE_API = "parley-api"
SERVICE_WORKER = "parley-worker"
SERVICE_SERVE = "parley-serve"
INSTRUMENTATION = "parley"

RUN_SUBMIT = "run.submit"
RUN_EXECUTE = "run.execute"
ENGINE_GENERATE = "engine.generate"
UPSTREAM_CHAT = "upstream.chat_completions"
TTFT_EVENT = "first_token"  # an event of engine.generate

# OpenTelemetry semantic conventions (HTTP, URL, server, GenAI, error)
HTTP_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_STATUS = "http.response.status_code"
URL_PATH = "url.path"
URL_SCHEME = "url.scheme"
URL_FULL = "url.full"
SERVER_ADDRESS = "server.address"
ERROR_TYPE = "error.type"
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_MODEL = "gen_ai.request.model"
GEN_AI_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_FINISH_REASONS = "gen_ai.response.finish_reasons"
# parley's own
RUN_ID = "parley.run.id"
RUN_ATTEMPT = "parley.run.attempt"
RUN_PRIORITY = "parley.run.priority"
RUN_TIER = "parley.run.tier"
TTFT_SECONDS = "parley.time_to_first_token_s"

TRACES_PATH = "/v1/traces"

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_HEADERS = (b"traceparent", b"tracestate")
_HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(slots=True)
class _State:  # process-wide like OpenTelemetry's global provider, but ``shutdown`` resets it
    tracer: trace.Tracer = field(default_factory=NoOpTracer)
    provider: TracerProvider | None = None


_state = _State()


# -- set-up ---------------------------------------------------------------------------------


def traces_endpoint(settings: Seen, environ: Mapping[str, str] = os.environ) -> str | None:
    """Where spans go (OTLP/HTTP), or None (off): ``otlp_endpoint`` + ``/v1/traces``, else
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as given, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` +
    ``/v1/traces``; ``OTEL_SDK_DISABLED=true`` turns the variables off."""
    if settings.otlp_endpoint:
        return _traces_url(settings.otlp_endpoint)
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    if environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return _traces_url(environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
    return None


def _traces_url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def configure(settings: Seen, *, service: str, exporter: SpanExporter | None = None) -> bool:
    """Install tracing for this process if it is configured (or ``exporter`` is given);
    whether it is on. ``service`` is the process's default ``service.name``."""
    endpoint = traces_endpoint(settings)
    if exporter is None and endpoint is None:
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    shutdown()
    name = settings.service_name or os.environ.get("OTEL_SERVICE_NAME") or service
    provider = TracerProvider(
        resource=Resource.create({"service.name": name}),
        sampler=ParentBased(TraceIdRatioBased(settings.trace_sample_ratio)),
    )
    if exporter is not None:  # handed in (tests): exported span by span
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    _state.provider = provider
    _state.tracer = provider.get_tracer(INSTRUMENTATION)
    return True


def shutdown() -> None:
    """Export what is pending and go back to the no-op tracer."""
    provider, _state.provider = _state.provider, None
    _state.tracer = NoOpTracer()
    if provider is not None:
        provider.shutdown()


def enabled() -> bool:
    return _state.provider is not None


# -- context --------------------------------------------------------------------------------


def traceparent() -> str | None:
    """The current context as a W3C ``traceparent`` (to store with a run), or None."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def inject(headers: MutableMapping[str, str]) -> None:
    """Put the current context in outgoing request headers (``traceparent``, ``tracestate``)."""
    _PROPAGATOR.inject(headers)


def trace_id() -> str | None:
    """The current trace id (32 hex digits), or None outside any trace."""
    found = trace.get_current_span().get_span_context()
    return format(found.trace_id, "032x") if found.is_valid else None


def set_attribute(key: str, value: str | int | float | bool) -> None:
    """On the current span (nothing when it does not record)."""
    trace.get_current_span().set_attribute(key, value)


def record_error(error: BaseException) -> None:
    """The exception, and an error status, on the current span."""
    span = trace.get_current_span()
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, type(error).__name__))


# -- the HTTP server span -------------------------------------------------------------------


class Exchange:
    """What the edge tells its request's span: the response status."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span | None) -> None:
        self.span = span

    def respond(self, status: int) -> None:
        if self.span is not None:
            self.span.set_attribute(HTTP_STATUS, status)
            if status >= 500:
                self.span.set_status(Status(StatusCode.ERROR))
                self.span.set_attribute(ERROR_TYPE, str(status))


_NONE = Exchange(None)
_OFF = nullcontext(_NONE)


def server_span(scope: MutableMapping[str, Any]) -> AbstractContextManager[Exchange]:
    """A server span for one ASGI HTTP request, the caller's context its parent; named
    ``{METHOD} {route template}`` once routing has matched (``{METHOD}`` if nothing did).
    Off, a caller's context is only passed through (and without one, nothing happens)."""
    carrier = _headers(scope)
    if _state.provider is not None:
        return _server_span(scope, carrier)
    return _passed_through(carrier) if "traceparent" in carrier else _OFF


@contextmanager
def _passed_through(carrier: dict[str, str]) -> Iterator[Exchange]:
    token = otel_context.attach(_PROPAGATOR.extract(carrier))
    try:
        yield _NONE
    finally:
        otel_context.detach(token)


@contextmanager
def _server_span(scope: MutableMapping[str, Any], carrier: dict[str, str]) -> Iterator[Exchange]:
    method = str(scope.get("method", "GET"))
    method = method if method in _HTTP_METHODS else "_OTHER"
    attributes = {
        HTTP_METHOD: method,
        URL_PATH: str(scope.get("path", "")),
        URL_SCHEME: str(scope.get("scheme", "http")),
    }
    with _state.tracer.start_as_current_span(
        method, context=_PROPAGATOR.extract(carrier), kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        try:
            yield Exchange(span)
        finally:
            route = getattr(scope.get("route"), "path", None)
            if isinstance(route, str):
                span.set_attribute(HTTP_ROUTE, route)
                span.update_name(f"{method} {route}")


def _headers(scope: Mapping[str, Any]) -> dict[str, str]:
    """The request's trace headers (ASGI names are lower-case), each only if sent once."""
    found = [(n, v) for n, v in scope.get("headers", ()) if n in _TRACE_HEADERS]
    if not found:
        return {}
    names = [name for name, _ in found]
    return {n.decode(): v.decode("latin-1") for n, v in found if names.count(n) == 1}


# -- runs -----------------------------------------------------------------------------------


def run_attributes(run: Run) -> dict[str, str | int]:
    return {RUN_ID: run.id, GEN_AI_MODEL: run.model, RUN_PRIORITY: run.priority, RUN_TIER: run.tier}


def traced(
    name: str, *, result: Callable[[T], Mapping[str, str | int]] | None = None
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
    """A coroutine function in a producer span; ``result`` gives attributes of its value."""

    def decorate(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            if _state.provider is None:
                return await fn(*args, **kwargs)
            with _state.tracer.start_as_current_span(name, kind=SpanKind.PRODUCER) as span:
                value = await fn(*args, **kwargs)
                if result is not None:
                    span.set_attributes(result(value))
                return value

        return wrapper

    return decorate


@contextmanager
def executing(run: Run) -> Iterator[None]:
    """``run.execute``: the child of the context stored with the run, in any process."""
    parent = _PROPAGATOR.extract({"traceparent": run.traceparent}) if run.traceparent else None
    attributes = {**run_attributes(run), RUN_ATTEMPT: run.attempts}
    with _state.tracer.start_as_current_span(
        RUN_EXECUTE, context=parent, kind=SpanKind.CONSUMER, attributes=attributes
    ):
        yield


# -- engine streams -------------------------------------------------------------------------


class _Generation:
    """What an engine stream produced, for its span."""

    def __init__(self, prompt_tokens: int | None) -> None:
        self.started = time.monotonic()
        self.tokens = 0
        self.prompt_tokens = prompt_tokens
        self.first = True
        self.finish: str | None = None

    def see(self, span: trace.Span, delta: Delta) -> None:
        if self.first and (delta.text or delta.tokens):
            self.first = False
            span.add_event(TTFT_EVENT, {TTFT_SECONDS: time.monotonic() - self.started})
        self.tokens += delta.tokens
        if delta.prompt_tokens is not None:
            self.prompt_tokens = delta.prompt_tokens
        if delta.finish_reason is not None:
            self.finish = str(delta.finish_reason)

    def close(self, span: trace.Span) -> None:
        span.set_attribute(GEN_AI_OUTPUT_TOKENS, self.tokens)
        if self.prompt_tokens is not None:
            span.set_attribute(GEN_AI_INPUT_TOKENS, self.prompt_tokens)
        if self.finish is not None:
            span.set_attribute(GEN_AI_FINISH_REASONS, [self.finish])


def generation(
    stream: AsyncIterator[Delta], *, model: str, max_tokens: int, prompt_tokens: int | None = None
) -> AsyncIterator[Delta]:
    """An engine's stream in an ``engine.generate`` span (the stream itself when off)."""
    if _state.provider is None:
        return stream
    attributes: dict[str, str | int] = {GEN_AI_OPERATION: "chat", GEN_AI_MODEL: model}
    attributes[GEN_AI_MAX_TOKENS] = max_tokens
    tally = _Generation(prompt_tokens)
    start = functools.partial(_state.tracer.start_span, ENGINE_GENERATE, attributes=attributes)
    return _spanned(stream, start, tally.see, tally.close)


def upstream(stream: AsyncIterator[T], *, url: str, model: str) -> AsyncIterator[T]:
    """One upstream request's stream in an ``upstream.chat_completions`` client span; while
    the stream runs that span is current, so ``inject`` sends it on."""
    if _state.provider is None:
        return stream
    host = url.split("://", 1)[-1].split("/", 1)[0]
    attributes = {HTTP_METHOD: "POST", URL_FULL: url, SERVER_ADDRESS: host, GEN_AI_MODEL: model}
    tracer = _state.tracer

    def start() -> trace.Span:
        return tracer.start_span(UPSTREAM_CHAT, kind=SpanKind.CLIENT, attributes=attributes)

    return _spanned(stream, start)


async def _spanned(
    stream: AsyncIterator[T],
    start: Callable[[], trace.Span],
    see: Callable[[trace.Span, T], None] | None = None,
    close: Callable[[trace.Span], None] | None = None,
) -> AsyncGenerator[T, None]:
    """``stream`` in a span from its first step to its end; each step runs with the span
    current (attached and detached within it: nothing leaks into the consumer's context)."""
    span = start()
    current = trace.set_span_in_context(span)
    try:
        while True:
            token = otel_context.attach(current)
            try:
                item = await anext(stream)
            except StopAsyncIteration:
                break
            finally:
                otel_context.detach(token)
            if see is not None:
                see(span, item)
            yield item
    except (GeneratorExit, asyncio.CancelledError):
        raise  # the consumer stopped: not an error
    except BaseException as e:
        span.record_exception(e)
        span.set_status(Status(StatusCode.ERROR, type(e).__name__))
        span.set_attribute(ERROR_TYPE, type(e).__name__)
        raise
    finally:
        closing = getattr(stream, "aclose", None)
        if closing is not None:
            await closing()
        if close is not None:
            close(span)
        span.end()
