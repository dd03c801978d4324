"""The process's background work, supervised (issue 39): a task that dies is logged, seen by
``/readyz`` and restarted; one that keeps dying, or an engine failed for good, makes the
process fatal (``/healthz`` 503), and its entry point exits non-zero."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from parley.engines.interface import EngineState
from parley.services import Services
from parley.supervision import Supervisor, TaskState
from tests.helpers import user_headers
from tests.runs.helpers import new_chat, send_json, wait_run
from tests.waiting import eventually


async def _true(value: bool) -> bool:
    return value


async def test_a_task_that_dies_is_logged_and_restarted(caplog: pytest.LogCaptureFixture) -> None:
    supervisor = Supervisor(first_backoff=0.01)
    runs = 0
    go_on = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("a lost connection")
        await go_on.wait()

    with caplog.at_level(logging.ERROR):
        supervisor.keep("sweeper", flaky)
        await eventually(lambda: _true(runs == 2), "the task to start again")
    assert "background task sweeper died" in caplog.text
    assert supervisor.watched["sweeper"].state is TaskState.RUNNING
    assert supervisor.watched["sweeper"].last_error == "RuntimeError: a lost connection"
    assert not supervisor.fatal.is_set()
    await supervisor.close()


async def test_a_task_that_keeps_dying_makes_the_process_fatal() -> None:
    supervisor = Supervisor(first_backoff=0.001, max_restarts=3)

    async def broken() -> None:
        raise RuntimeError("always")

    supervisor.keep("archive", broken)
    await asyncio.wait_for(supervisor.fatal.wait(), 10)
    assert supervisor.watched["archive"].state is TaskState.FAILED
    assert supervisor.reason == "archive died 4 times: RuntimeError: always"
    assert supervisor.problems() == {"archive": "failed: RuntimeError: always"}
    await supervisor.close()


async def test_a_task_that_returns_while_the_process_runs_is_restarted() -> None:
    supervisor = Supervisor(first_backoff=0.001)
    runs = 0

    async def returns() -> None:
        nonlocal runs
        runs += 1
        if runs > 1:
            await asyncio.Event().wait()

    supervisor.keep("worker", returns)
    await eventually(lambda: _true(runs == 2), "the task to start again")
    assert supervisor.watched["worker"].last_error == (
        "worker returned while the process was running"
    )
    await supervisor.close()


async def test_health_sees_a_restarting_task_and_a_fatal_process(
    client: httpx.AsyncClient, services: Services
) -> None:
    supervisor = services.supervisor
    supervisor.first_backoff = 60  # stays restarting while the test looks
    died = asyncio.Event()

    async def dies() -> None:
        died.set()
        raise RuntimeError("the bus went away")

    supervisor.keep("sweeper", dies)
    await died.wait()
    await eventually(
        lambda: _true(supervisor.watched["sweeper"].state is TaskState.RESTARTING), "restarting"
    )
    r = await client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["checks"]["tasks"] == "sweeper restarting: RuntimeError: the bus went away"
    assert (await client.get("/healthz")).status_code == 200
    supervisor.fail("the engine failed and could not restart")
    r = await client.get("/healthz")
    assert r.status_code == 503
    assert r.json() == {"status": "failing", "reason": "the engine failed and could not restart"}
    await supervisor.close()


class _Engine:
    def __init__(self) -> None:
        self.current = EngineState.READY

    def state(self) -> EngineState:
        return self.current


async def test_an_engine_failed_for_good_makes_the_process_fatal() -> None:
    supervisor = Supervisor()
    engine = _Engine()
    supervisor.watch_engine(engine, interval=0.01)  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not supervisor.fatal.is_set()
    engine.current = EngineState.FAILED
    await asyncio.wait_for(supervisor.fatal.wait(), 10)
    assert supervisor.reason == "the engine failed and could not restart"
    await supervisor.close()


async def test_a_worker_whose_lease_renewer_dies_is_restarted_and_serves(
    run_client: httpx.AsyncClient, run_services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    """The renewer dying takes the worker's loop down with it (a worker that cannot renew
    its leases must not take runs): the supervisor starts both again."""
    worker = run_services.worker
    assert worker is not None
    offer = worker._offer_capacity
    calls = 0

    async def breaks_once() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # the renewer's second pass
            raise RuntimeError("the renewer broke")
        await offer()

    run_services.supervisor.first_backoff = 0.01
    worker._offer_capacity = breaks_once  # type: ignore[method-assign]
    watched = run_services.supervisor.watched["worker"]
    with caplog.at_level(logging.ERROR):
        await eventually(lambda: _true(calls >= 3), "the worker to start again")
    assert "background task worker died" in caplog.text
    assert watched.last_error == "RuntimeError: the renewer broke"
    assert watched.state is TaskState.RUNNING
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await new_chat(run_client, auth)
    sent = await send_json(run_client, auth, chat_id, "still there?")
    assert (await wait_run(run_client, auth, sent["run_id"]))["status"] == "completed"
