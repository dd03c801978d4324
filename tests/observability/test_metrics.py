"""``/metrics``: counters and histograms move by what the runs did, on both real shapes
(SQLite + in-process bus, Postgres + Redis); and across separate api and worker processes
sharing a ``metrics_dir``, the api's /metrics shows what the worker measured."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from parley.bus.memory import MemoryBus
from parley.config import load_settings
from parley.connections import bus_limits
from parley.engines.fake import FAKE_MODEL, FakeEngine, FakeEngineConfig
from parley.engines.interface import ChatMessage, GenerationRequest
from parley.errors import ConfigurationError
from parley.observability.metrics import build_metrics
from tests.builders import BACKENDS, REDIS_URL, truncate
from tests.helpers import user_headers
from tests.processes import Parley, free_port
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.sse import events
from tests.waiting import eventually

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` that carry ``labels`` (0 when there are none)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


async def scrape(client: httpx.AsyncClient, **headers: str) -> Samples:
    r = await client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return parse(r.text)


# The free tier's budget: 110 tokens, refilled at 1 a minute; three short runs (each
# reserving 35: 30 of output and a 5-token prompt; each using 29) leave it below what any
# message reserves.
TIGHT_FREE_TIER = {
    "free": {
        "priority": 0,
        "tokens_per_minute": 1,
        "burst_tokens": 110,
        "max_concurrent_runs": 4,
        "max_output_tokens": 30,
    },
    "pro": {
        "priority": 2,
        "tokens_per_minute": 50_000,
        "burst_tokens": 500_000,
        "max_concurrent_runs": 8,
        "max_output_tokens": 4_096,
    },
}


@pytest.fixture
def run_overrides() -> dict[str, Any]:
    return {"tiers": TIGHT_FREE_TIER, "fake_engine": {"output_tokens": 24}}


async def _three_runs(client: httpx.AsyncClient, auth: dict[str, str]) -> list[dict[str, Any]]:
    sent = [await send_json(client, auth, await new_chat(client, auth)) for _ in range(3)]
    return [await wait_run(client, auth, s["run_id"]) for s in sent]


async def test_counters_and_histograms_move_by_what_the_runs_did(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    before = await scrape(run_client)
    runs = await _three_runs(run_client, auth)
    assert [r["status"] for r in runs] == ["completed"] * 3
    prompt = sum(r["usage"]["prompt_tokens"] for r in runs)
    completion = sum(r["usage"]["completion_tokens"] for r in runs)
    assert completion == 3 * 24

    async def settled() -> Samples | None:  # the finisher's listener runs after `done`
        now = await scrape(run_client)
        ended = total(now, "parley_runs_total") - total(before, "parley_runs_total")
        return now if ended >= 3 else None

    after = await eventually(settled, "the three runs to be counted")

    def moved(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    by = {"model": FAKE_MODEL, "tier": "free"}
    assert moved("parley_runs_total", status="completed", **by) == 3
    assert moved("parley_runs_total") == 3
    assert moved("parley_time_to_first_token_seconds_count", **by) == 3
    assert moved("parley_time_to_first_token_seconds_sum", **by) > 0
    assert moved("parley_inter_token_latency_seconds_count", **by) == completion - 3
    assert moved("parley_run_duration_seconds_count", status="completed", **by) == 3
    assert moved("parley_completion_tokens_total", **by) == completion
    assert moved("parley_prompt_tokens_total", **by) == prompt
    inf = {"le": "+Inf", **by}
    assert moved("parley_time_to_first_token_seconds_bucket", **inf) == 3
    assert moved("parley_runs_admitted_total", **by) == 3
    assert moved("parley_queue_wait_seconds_count", **by) == 3  # one wait each, as it started
    assert moved("parley_queue_wait_seconds_bucket", **inf) == 3


async def test_a_budget_refusal_is_counted_under_its_tier_and_reason(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    await _three_runs(run_client, auth)
    before = await scrape(run_client)
    chat_id = await new_chat(run_client, auth)
    r = await run_client.post(
        f"/api/chats/{chat_id}/messages",
        json={"content": "x" * 300},
        headers={**auth, "Accept": "application/json"},
    )
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "budget_exhausted"
    after = await scrape(run_client)
    refusals = "parley_admission_refusals_total"
    labels = {"tier": "free", "reason": "budget_exhausted"}
    assert total(after, refusals, **labels) - total(before, refusals, **labels) == 1
    assert total(after, refusals) - total(before, refusals) == 1


# paced: the answer is still being relayed when the client has read its third delta (at the
# file's 2 ms a token, a loaded machine relayed the whole answer, and closed the stream,
# before the client had parsed three deltas)
@pytest.mark.parametrize(
    "run_overrides",
    [{"fake_engine": {"inter_token_latency_ms": 100, "output_tokens": 40}}],
    ids=["paced"],
)
async def test_a_resumed_stream_is_counted_and_open_streams_return_to_zero(
    run_client: httpx.AsyncClient,
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    seen = []
    async with run_client.stream(
        "POST", f"/api/chats/{chat_id}/messages", json={"content": "hi"}, headers=auth
    ) as r:
        async for ev in events(r):
            seen.append(ev)
            if sum(e.event == "delta" for e in seen) == 3:
                during = await scrape(run_client)
                assert total(during, "parley_open_streams") == 1
                break  # the client goes away mid-answer
    before = await scrape(run_client)
    resume = {**auth, "Last-Event-ID": str(seen[-1].id)}
    async with run_client.stream(
        "GET", f"/api/runs/{seen[0].data['run_id']}/events", headers=resume
    ) as r:
        assert r.status_code == 200
        rest = [ev async for ev in events(r)]
    assert rest[-1].event == "done"
    after = await scrape(run_client)
    assert (
        total(after, "parley_stream_resumes_total") - total(before, "parley_stream_resumes_total")
        == 1
    )

    async def closed() -> bool:
        return total(await scrape(run_client), "parley_open_streams") == 0

    await eventually(closed, "every stream to be counted closed")


# -- settings, the token, the queue, the engines ------------------------------------------


def test_metrics_dir_must_be_an_existing_writable_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="metrics_dir"):
        load_settings(data_dir=tmp_path, metrics_dir=tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigurationError, match="not a directory"):
        load_settings(data_dir=tmp_path, metrics_dir=tmp_path / "file")
    (tmp_path / "m").mkdir()
    assert (
        load_settings(data_dir=tmp_path, metrics_dir=tmp_path / "m").observability.metrics_dir
        == (tmp_path / "m").resolve()
    )


@pytest.mark.parametrize("settings_overrides", [{"metrics_token": "scrape-me"}])
async def test_a_metrics_token_guards_the_scrape(client: httpx.AsyncClient) -> None:
    assert (await client.get("/metrics")).status_code == 401
    wrong = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    samples = await scrape(client, Authorization="Bearer scrape-me")
    assert ("parley_open_streams", frozenset()) in samples


async def test_metrics_is_open_without_a_token_and_not_in_the_api_document(
    client: httpx.AsyncClient,
) -> None:
    await scrape(client)
    document = (await client.get("/openapi.json")).json()
    assert "/metrics" not in document["paths"]


async def test_queue_depth_is_read_by_priority_at_scrape_time(client: httpx.AsyncClient) -> None:
    """No worker here: the runs stay queued."""
    auth = await user_headers(client, "ada@example.com")
    empty = await scrape(client)
    assert total(empty, "parley_queue_depth", priority="0") == 0
    for _ in range(2):
        await send_json(client, auth, await new_chat(client, auth))
    queued = await scrape(client)
    assert total(queued, "parley_queue_depth", priority="0") == 2
    assert total(queued, "parley_queue_depth", priority="2") == 0


async def test_the_fake_engine_s_busy_slots_are_its_batch_size(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path, engine="fake")
    engine = FakeEngine(FakeEngineConfig(time_to_first_token=0, inter_token_latency=0))
    metrics = build_metrics(settings.observability, settings.engines, settings.qos)
    bus = MemoryBus(bus_limits(settings))
    stream = engine.stream(_request("r1", max_tokens=8))
    await anext(stream)  # generating now
    busy = parse((await metrics.exposition(bus, engine)).decode())
    assert total(busy, "parley_engine_batch_size", model=FAKE_MODEL) == 1
    await stream.aclose()  # type: ignore[attr-defined]
    idle = parse((await metrics.exposition(bus, engine)).decode())
    assert total(idle, "parley_engine_batch_size", model=FAKE_MODEL) == 0


async def test_the_builtin_engine_s_kv_and_prefix_cache_are_reported(tmp_path: Path) -> None:
    from parley.engines.builtin.engine import BuiltinEngine, BuiltinEngineConfig
    from parley.engines.builtin.loader import load_model
    from tests.engines.tiny import save_tiny_chat_model

    settings = load_settings(data_dir=tmp_path, engine="fake")
    engine = BuiltinEngine(
        load_model(save_tiny_chat_model(tmp_path / "tiny")),
        BuiltinEngineConfig(kv_cache_tokens=1024, block_size=16),
    )
    metrics = build_metrics(settings.observability, settings.engines, settings.qos)
    bus = MemoryBus(bus_limits(settings))
    try:
        for run_id in ("r1", "r2"):  # the same long prompt twice: the second finds it cached
            async for _ in engine.stream(_request(run_id, max_tokens=2, content="a" * 100)):
                pass
        samples = parse((await metrics.exposition(bus, engine)).decode())
    finally:
        await engine.close()
    model = {"model": FAKE_MODEL}  # the one served model's name, as the settings give it
    assert total(samples, "parley_engine_kv_cache_blocks", **model) == 1024 // 16
    queries = total(samples, "parley_engine_prefix_cache_queries_total", **model)
    hits = total(samples, "parley_engine_prefix_cache_hits_total", **model)
    assert queries > 0
    assert 0 < hits < queries  # the second prompt's full blocks, not the first's
    assert total(samples, "parley_engine_batch_size", **model) == 0  # idle again


def _request(run_id: str, *, max_tokens: int, content: str = "hi") -> GenerationRequest:
    return GenerationRequest(
        request_id=run_id,
        model=FAKE_MODEL,
        messages=[ChatMessage("user", content)],
        max_tokens=max_tokens,
    )


# -- separate processes: api + worker sharing a metrics directory -------------------------


@pytest.mark.slow
@pytest.mark.skipif("postgres" not in BACKENDS, reason="needs Postgres")
async def test_the_api_shows_what_a_separate_worker_process_measured(
    postgres_url: str, tmp_path: Path
) -> None:
    """``parley api`` and ``parley worker`` with one ``metrics_dir``: the worker generates,
    the api's /metrics shows its time-to-first-token observations and its engine's load.
    The worker also answers its own /metrics and /healthz (``--metrics-port``)."""
    await truncate(postgres_url)
    (tmp_path / "metrics").mkdir()
    env = {
        "PARLEY_DATABASE_URL": postgres_url,
        "PARLEY_REDIS_URL": REDIS_URL,
        "PARLEY_REDIS_NAMESPACE": f"test-{uuid.uuid4().hex[:10]}",
        "PARLEY_ENGINE": "fake",
        "PARLEY_FAKE_ENGINE__OUTPUT_TOKENS": "12",
        "PARLEY_METRICS_DIR": str(tmp_path / "metrics"),
        "PARLEY_METRICS_SAMPLE_SECONDS": "0.2",
    }
    port, worker_port = free_port(), free_port()
    api = Parley(["api", "--port", str(port)], env, tmp_path / "api.log")
    worker_args = ["worker", "--metrics-port", str(worker_port)]
    worker = Parley(worker_args, env, tmp_path / "worker.log")
    base = f"http://127.0.0.1:{port}"
    try:
        api.wait_ready(base)
        worker.wait_log("taking runs")
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            await _two_runs_measured_by_the_worker(client)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{worker_port}") as own:
            mine = await scrape(own)  # the same directory: the worker sees all of it too
            by = {"model": FAKE_MODEL, "tier": "free"}
            assert total(mine, "parley_time_to_first_token_seconds_count", **by) == 2
            health = await own.get("/healthz")  # a liveness probe's (deploy/kubernetes)
            assert health.status_code == 200 and health.json()["status"] == "ok"
    finally:
        api.stop()
        worker.stop()


async def _two_runs_measured_by_the_worker(client: httpx.AsyncClient) -> None:
    auth = await user_headers(client, "ada@example.com")
    sent = [await send_json(client, auth, await new_chat(client, auth)) for _ in range(2)]
    runs = [await wait_run(client, auth, s["run_id"]) for s in sent]
    assert [r["status"] for r in runs] == ["completed"] * 2
    by = {"model": FAKE_MODEL, "tier": "free"}

    async def counted() -> Samples | None:
        samples = await scrape(client)
        done = total(samples, "parley_runs_total", status="completed", **by)
        return samples if done == 2 else None

    samples = await eventually(counted, "the api to show the worker's two runs")
    assert total(samples, "parley_time_to_first_token_seconds_count", **by) == 2
    assert total(samples, "parley_inter_token_latency_seconds_count", **by) == 2 * 11
    assert total(samples, "parley_completion_tokens_total", **by) == 2 * 12
    # sampled in the worker's process only (the api has no engine): present, idle now
    await eventually(
        lambda: _sampled(client), "the api to show the worker's engine load", timeout=30
    )


async def _sampled(client: httpx.AsyncClient) -> bool:
    samples = await scrape(client)
    return ("parley_engine_batch_size", frozenset({("model", FAKE_MODEL)})) in samples


async def test_the_grafana_dashboard_only_asks_for_metrics_parley_exposes(
    client: httpx.AsyncClient,
) -> None:
    r = await client.get("/metrics")
    families = {f.name for f in text_string_to_metric_families(r.text)}
    dashboard = (Path(__file__).parents[2] / "deploy" / "grafana" / "parley.json").read_text()
    asked = {
        re.sub(r"_(bucket|total|count|sum)$", "", name)
        for name in re.findall(r"parley_[a-z_]+", dashboard)
    }
    assert asked, "the dashboard names no parley metric"
    assert asked <= families, asked - families
