"""Traces (``parley.observability.tracing``): a caller's trace, from the HTTP request through
the queue and the worker to the engine and the upstream server, in one process and across
processes; and nothing at all when tracing is off."""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from parley import logs
from parley.config import Settings, load_settings
from parley.errors import ConfigurationError
from parley.observability import tracing
from parley.services import Services
from parley.store.schema import Run
from tests.builders import BACKENDS, REDIS_URL, truncate
from tests.fleet.conftest import Fleet
from tests.fleet.servers import Misbehaving
from tests.helpers import user_headers
from tests.observability.collector import Collector, Received
from tests.processes import Parley, free_port
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.waiting import eventually

SUBMIT_ROUTE = "/api/chats/{chat_id}/messages"
RUN_SPANS = (
    f"POST {SUBMIT_ROUTE}",
    tracing.RUN_SUBMIT,
    tracing.RUN_EXECUTE,
    tracing.ENGINE_GENERATE,
)


def caller() -> tuple[str, str, str]:
    """A caller's (trace id, span id, ``traceparent``), sampled."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def hex_id(value: int, digits: int) -> str:
    return format(value, f"0{digits}x")


def spans_of(memory: InMemorySpanExporter, trace_id: str) -> dict[str, ReadableSpan]:
    """The finished spans of one trace, by name (each name once)."""
    found: dict[str, ReadableSpan] = {}
    for span in memory.get_finished_spans():
        assert span.context is not None
        if hex_id(span.context.trace_id, 32) == trace_id:
            assert span.name not in found, f"two {span.name} spans"
            found[span.name] = span
    return found


def parent_of(span: ReadableSpan) -> str | None:
    return None if span.parent is None else hex_id(span.parent.span_id, 16)


def span_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return hex_id(span.context.span_id, 16)


class BoundContext(logging.Handler):
    """Each worker log line with the context fields bound where it was logged."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, dict[str, str]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.getMessage(), logs.bound()))


@pytest.fixture
def worker_lines() -> Iterator[list[tuple[str, dict[str, str]]]]:
    logger = logging.getLogger("parley.runs.worker")
    handler, level = BoundContext(), logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def memory() -> Iterator[InMemorySpanExporter]:
    """Tracing on, through the set-up the processes use, exporting to memory."""
    exporter = InMemorySpanExporter()
    assert tracing.configure(
        load_settings().observability, service="parley-test", exporter=exporter
    )
    yield exporter
    tracing.shutdown()


async def _traced_run(
    client: httpx.AsyncClient, auth: dict[str, str], traceparent: str
) -> dict[str, Any]:
    chat_id = await new_chat(client, auth)
    r = await client.post(
        f"/api/chats/{chat_id}/messages",
        json={"content": "hello"},
        headers={**auth, "Accept": "application/json", "traceparent": traceparent},
    )
    assert r.status_code == 202, r.text
    sent: dict[str, Any] = r.json()
    return await wait_run(client, auth, sent["run_id"])


async def _stored_traceparent(services: Services, run_id: str) -> str | None:
    async with services.db.transaction() as s:
        run = await s.get(Run, run_id)
        assert run is not None
        return run.traceparent


async def test_one_trace_spans_api_queue_worker_and_engine(
    memory: InMemorySpanExporter,
    run_services: Services,
    run_client: httpx.AsyncClient,
    worker_lines: list[tuple[str, dict[str, str]]],
) -> None:
    trace_id, parent_id, traceparent = caller()
    auth = await user_headers(run_client, "ada@example.com")
    run = await _traced_run(run_client, auth, traceparent)
    assert run["status"] == "completed", run

    async def all_ended() -> dict[str, ReadableSpan] | None:
        spans = spans_of(memory, trace_id)
        return spans if set(RUN_SPANS) <= set(spans) else None

    spans = await eventually(all_ended, f"the spans {RUN_SPANS} under the caller's trace")
    http, submit, execute, generate = (spans[name] for name in RUN_SPANS)
    # one chain of parents, from the caller's span to the engine, across the queue
    assert parent_of(http) == parent_id
    assert http.parent is not None and http.parent.is_remote
    assert parent_of(submit) == span_id(http)
    assert parent_of(execute) == span_id(submit)
    assert parent_of(generate) == span_id(execute)
    stored = await _stored_traceparent(run_services, run["id"])
    assert stored == f"00-{trace_id}-{span_id(submit)}-01"

    assert http.kind is SpanKind.SERVER
    assert http.attributes is not None
    assert http.attributes[tracing.HTTP_METHOD] == "POST"
    assert http.attributes[tracing.HTTP_ROUTE] == SUBMIT_ROUTE
    assert http.attributes[tracing.HTTP_STATUS] == 202
    assert (submit.kind, execute.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert submit.attributes is not None and execute.attributes is not None
    assert submit.attributes[tracing.RUN_ID] == execute.attributes[tracing.RUN_ID] == run["id"]
    assert execute.attributes[tracing.RUN_ATTEMPT] == 1

    assert generate.attributes is not None
    assert generate.attributes[tracing.GEN_AI_MODEL] == run["model"]
    assert generate.attributes[tracing.GEN_AI_INPUT_TOKENS] == run["usage"]["prompt_tokens"]
    assert generate.attributes[tracing.GEN_AI_OUTPUT_TOKENS] == run["usage"]["completion_tokens"]
    assert generate.attributes[tracing.GEN_AI_FINISH_REASONS] == (run["finish_reason"],)
    assert [e.name for e in generate.events] == [tracing.TTFT_EVENT]

    # the worker's log lines for the run carry the caller's trace id
    started = [ctx for line, ctx in worker_lines if line.startswith(f"run {run['id']} started")]
    assert started and started[0]["trace_id"] == trace_id


async def test_a_request_without_traceparent_starts_a_trace_the_worker_joins(
    memory: InMemorySpanExporter, run_client: httpx.AsyncClient
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    sent = await send_json(run_client, auth, chat_id)
    await wait_run(run_client, auth, sent["run_id"])

    def run_spans() -> list[ReadableSpan]:
        return [
            s
            for s in memory.get_finished_spans()
            if s.attributes is not None and s.attributes.get(tracing.RUN_ID) == sent["run_id"]
        ]

    async def both() -> list[ReadableSpan] | None:
        found = run_spans()
        return (
            found if {s.name for s in found} == {tracing.RUN_SUBMIT, tracing.RUN_EXECUTE} else None
        )

    found = {s.name: s for s in await eventually(both, "run.submit and run.execute")}
    submit, execute = found[tracing.RUN_SUBMIT], found[tracing.RUN_EXECUTE]
    assert submit.context is not None and execute.context is not None
    assert submit.context.trace_id == execute.context.trace_id
    assert parent_of(execute) == span_id(submit)
    assert submit.parent is not None and not submit.parent.is_remote  # the server span's child


async def test_the_upstream_request_carries_the_trace_on(
    memory: InMemorySpanExporter, fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    server = misbehaving("quirky")  # a real server (a process) that answers well
    trace_id, _, traceparent = caller()
    async with fleet([server.url]) as front:
        run = await _traced_run(front.client, front.auth, traceparent)
    assert run["status"] == "completed", run

    names = (tracing.ENGINE_GENERATE, tracing.UPSTREAM_CHAT)

    async def ended() -> dict[str, ReadableSpan] | None:
        spans = spans_of(memory, trace_id)
        return spans if set(names) <= set(spans) else None

    spans = await eventually(ended, f"the spans {names} under the caller's trace")
    generate, upstream = spans[tracing.ENGINE_GENERATE], spans[tracing.UPSTREAM_CHAT]
    # the header the server received: the caller's trace, the upstream span its parent
    assert server.traceparent() == f"00-{trace_id}-{span_id(upstream)}-01"
    assert parent_of(upstream) == span_id(generate)
    assert upstream.kind is SpanKind.CLIENT
    assert upstream.attributes is not None
    assert upstream.attributes[tracing.URL_FULL] == f"{server.url}/chat/completions"
    assert upstream.attributes[tracing.HTTP_STATUS] == 200
    assert generate.attributes is not None
    assert generate.attributes[tracing.GEN_AI_INPUT_TOKENS] == 21  # the upstream's usage
    assert generate.attributes[tracing.GEN_AI_OUTPUT_TOKENS] == 7


async def test_an_upstream_failure_is_recorded_on_its_spans(
    memory: InMemorySpanExporter, fleet: Fleet, misbehaving: Callable[[str], Misbehaving]
) -> None:
    server = misbehaving("error500")
    trace_id, _, traceparent = caller()
    async with fleet([server.url], max_attempts=1) as front:
        run = await _traced_run(front.client, front.auth, traceparent)
    assert run["status"] == "failed", run

    names = (tracing.ENGINE_GENERATE, tracing.UPSTREAM_CHAT)

    async def ended() -> dict[str, ReadableSpan] | None:
        spans = spans_of(memory, trace_id)
        return spans if set(names) <= set(spans) else None

    spans = await eventually(ended, f"the spans {names} under the caller's trace")
    for name in names:
        span = spans[name]
        assert span.status.status_code is StatusCode.ERROR, name
        assert span.attributes is not None
        assert span.attributes[tracing.ERROR_TYPE] == "EngineUnavailable"
        assert [e.name for e in span.events] == ["exception"]
    assert spans[tracing.UPSTREAM_CHAT].attributes[tracing.HTTP_STATUS] == 500  # type: ignore[index]
    assert server.traceparent() == f"00-{trace_id}-{span_id(spans[tracing.UPSTREAM_CHAT])}-01"


# -- off by default ----------------------------------------------------------------------


def test_tracing_is_off_without_an_endpoint(
    run_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert tracing.traces_endpoint(run_settings.observability) is None
    assert not tracing.configure(run_settings.observability, service="parley-test")
    assert not tracing.enabled()
    # nothing installed anywhere: OpenTelemetry's global provider is still its proxy
    assert not hasattr(trace.get_tracer_provider(), "add_span_processor")


async def test_off_records_nothing_but_passes_the_callers_trace_through(
    run_services: Services,
    run_client: httpx.AsyncClient,
    worker_lines: list[tuple[str, dict[str, str]]],
) -> None:
    assert not tracing.enabled()
    trace_id, parent_id, traceparent = caller()
    auth = await user_headers(run_client, "ada@example.com")
    run = await _traced_run(run_client, auth, traceparent)
    assert run["status"] == "completed", run
    # stored as the caller sent it (no span of parley's own in between) ...
    assert await _stored_traceparent(run_services, run["id"]) == traceparent
    # ... so the worker's lines carry the caller's trace id
    started = [ctx for line, ctx in worker_lines if line.startswith(f"run {run['id']} started")]
    assert started and started[0]["trace_id"] == trace_id
    assert parent_id in traceparent


async def test_off_leaves_engine_streams_unwrapped() -> None:
    async def stream() -> Any:
        yield None

    original = stream()
    assert tracing.generation(original, model="m", max_tokens=1) is original
    assert tracing.upstream(original, url="http://x/v1", model="m") is original


def test_the_endpoint_comes_from_settings_then_the_standard_variables() -> None:
    def endpoint(environ: dict[str, str], **settings: Any) -> str | None:
        return tracing.traces_endpoint(load_settings(**settings).observability, environ=environ)

    base = "http://collector:4318"
    assert endpoint({}, otlp_endpoint=base) == f"{base}/v1/traces"
    assert endpoint({}, otlp_endpoint=f"{base}/v1/traces/") == f"{base}/v1/traces"
    assert endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": base}) == f"{base}/v1/traces"
    full = "http://other:4318/custom/traces"
    assert endpoint({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": full}) == full
    assert endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_SDK_DISABLED": "true"}) is None


@pytest.mark.parametrize("bad", [{"otlp_endpoint": "collector:4318"}, {"trace_sample_ratio": 1.5}])
def test_tracing_settings_are_validated_at_start_up(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        load_settings(**bad)


# -- OTLP export, across processes -------------------------------------------------------


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.stop()


@pytest.mark.slow
@pytest.mark.skipif("postgres" not in BACKENDS, reason="needs Postgres")
async def test_api_and_worker_processes_export_one_trace_over_otlp(
    collector: Collector, postgres_url: str, tmp_path: Path
) -> None:
    await truncate(postgres_url)
    env = {
        "PARLEY_DATABASE_URL": postgres_url,
        "PARLEY_REDIS_URL": REDIS_URL,
        "PARLEY_REDIS_NAMESPACE": f"test-{uuid.uuid4().hex[:10]}",
        "PARLEY_ENGINE": "fake",
        "PARLEY_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms: export soon, not every 5 s
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    api = Parley(["api", "--port", str(port)], env, tmp_path / "api.log")
    worker = Parley(["worker"], env, tmp_path / "worker.log")
    try:
        api.wait_ready(base)
        worker.wait_log("taking runs")
        trace_id, parent_id, traceparent = caller()
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            auth = await user_headers(client, "ada@example.com")
            run = await _traced_run(client, auth, traceparent)
        assert run["status"] == "completed", run

        async def exported() -> dict[str, Received] | None:
            found = {r.name: r for r in collector.spans(trace_id)}
            return found if set(RUN_SPANS) <= set(found) else None

        spans = await eventually(exported, f"{RUN_SPANS} at the collector, from both processes")
    finally:
        api.stop()
        worker.stop()
    http, submit, execute, generate = (spans[name] for name in RUN_SPANS)
    assert (http.service, submit.service) == (tracing.SERVICE_API, tracing.SERVICE_API)
    assert (execute.service, generate.service) == (tracing.SERVICE_WORKER, tracing.SERVICE_WORKER)
    assert http.parent_id == parent_id
    assert submit.parent_id == http.span_id
    assert execute.parent_id == submit.span_id  # across the queue, into the other process
    assert generate.parent_id == execute.span_id
