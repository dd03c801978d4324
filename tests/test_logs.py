"""Log lines: JSON objects off a terminal, readable text on one or when asked; the context
(request, trace, run, user) each line carries; nothing of a conversation or a secret."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import pty
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley import logs
from tests.processes import Parley, free_port
from tests.waiting import eventually_sync

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
PASSWORD = "correct horse battery 9117"
CONTENT = "the name of my cat is Quetzalcoatl-5521"
TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+: .+")


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of the file, each parsed as one JSON object (a line that is not fails)."""
    lines = path.read_text().splitlines()
    assert lines, "nothing was logged"
    return [json.loads(line) for line in lines]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[Parley, str]]:
    """``parley serve --engine fake`` with stdout and stderr to a file: not a terminal."""
    port = free_port()
    args = ["serve", "--engine", "fake", "--data-dir", str(tmp_path), "--port", str(port)]
    proc = Parley(args, env={}, log=tmp_path / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready(base)
        yield proc, base
    finally:
        proc.stop()


@pytest.mark.slow
def test_off_a_terminal_every_line_is_json_with_its_request_trace_run_and_user(
    serve: tuple[Parley, str],
) -> None:
    proc, base = serve
    with httpx.Client(base_url=base, timeout=30) as c:
        r = c.post("/api/auth/signup", json={"email": "ada@example.com", "password": PASSWORD})
        assert r.status_code == 201, r.text
        token, user_id = r.json()["token"], r.json()["user"]["id"]
        auth = {"Authorization": f"Bearer {token}"}
        chat = c.post("/api/chats", json={}, headers=auth).json()["id"]
        sent = c.post(
            f"/api/chats/{chat}/messages",
            json={"content": CONTENT},
            headers={**auth, "Accept": "application/json", "traceparent": TRACEPARENT},
        )
        assert sent.status_code == 202, sent.text
        run_id, request_id = sent.json()["run_id"], sent.headers["x-request-id"]
        # an upper-case trace id is malformed: ignored, the request id still bound
        me = c.get("/api/me", headers={**auth, "traceparent": TRACEPARENT.upper()})
        eventually_sync(
            lambda: c.get(f"/api/runs/{run_id}", headers=auth).json()["status"] == "completed",
            "the run to complete",
        )

    def run_ended() -> list[dict[str, Any]]:
        return [
            line
            for line in json_lines(proc.log)
            if line.get("run_id") == run_id and "ended with completed" in line["message"]
        ]

    ended = eventually_sync(run_ended, "the worker's line of the run's end")
    lines = json_lines(proc.log)
    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys(), line
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"]), line
    assert any(
        line.get("request_id") == request_id and line.get("trace_id") == TRACE_ID for line in lines
    ), lines
    # the API's lines of an authenticated request carry its user (the access line included)
    access = [
        line
        for line in lines
        if line.get("request_id") == request_id and line["logger"] == "uvicorn.access"
    ]
    assert access and all(line.get("user_id") == user_id for line in access), access
    of_me = [line for line in lines if line.get("request_id") == me.headers["x-request-id"]]
    assert of_me and all("trace_id" not in line for line in of_me), of_me
    run_lines = [line for line in lines if line.get("run_id") == run_id]
    assert any(f"run {run_id} started" in line["message"] for line in run_lines), run_lines
    assert all(line["user_id"] == user_id for line in run_lines), run_lines
    assert ended[0]["logger"] == "parley.runs.worker"
    text = proc.log.read_text()
    for secret in (CONTENT, "Quetzalcoatl", PASSWORD, token):
        assert secret not in text


def run_parley(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    return subprocess.run(
        [sys.executable, "-m", "parley", *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=60,
        check=False,
    )


def assert_readable(stderr: str) -> None:
    lines = stderr.splitlines()
    assert lines, "nothing was logged"
    for line in lines:
        assert TEXT_LINE.fullmatch(line), line
        with pytest.raises(json.JSONDecodeError):
            json.loads(line)
    # logged while the settings loaded (before the format was known), then in the format
    assert any(" WARNING parley.config: secret_key is at its default" in line for line in lines)


@pytest.mark.parametrize(
    ("flags", "env"),
    [(["--log-format", "text"], {}), ([], {"PARLEY_LOG_FORMAT": "text"})],
    ids=["flag", "environment"],
)
def test_text_is_readable_lines_even_off_a_terminal(
    tmp_path: Path, flags: list[str], env: dict[str, str]
) -> None:
    r = run_parley(*flags, "migrate", "--data-dir", str(tmp_path), env=env)
    assert r.returncode == 0, r.stderr
    assert_readable(r.stderr)
    assert "Running upgrade" in r.stderr


def test_auto_is_json_off_a_terminal(tmp_path: Path) -> None:
    r = run_parley("migrate", "--data-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stderr.splitlines()]
    assert {"parley.config", "alembic.runtime.migration"} <= {line["logger"] for line in lines}


def test_auto_is_readable_text_on_a_terminal(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "parley", "migrate", "--data-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=secondary,
        env=base,
    )
    os.close(secondary)
    out = b""
    try:
        while chunk := os.read(primary, 4096):
            out += chunk
    except OSError:  # EIO: the process closed the terminal
        pass
    finally:
        os.close(primary)
    assert proc.wait(timeout=60) == 0, out
    assert_readable(out.decode())


def test_a_bad_log_format_is_refused() -> None:
    r = run_parley("--log-format", "xml", "migrate")
    assert r.returncode == 2 and "--log-format" in r.stderr
    r = run_parley("migrate", env={"PARLEY_LOG_FORMAT": "xml"})
    assert r.returncode == 2 and "log_format" in r.stderr


# -- the formatters and the context, in process


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing JSON lines to a buffer (and nowhere else)."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("parley.tests.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, buffer
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def parsed(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_only_the_allow_listed_context_reaches_a_line(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = captured
    with logs.bind(request_id="r1", trace_id=TRACE_ID):
        with logs.bind(run_id="run_1", user_id="user_1", request_id=None):
            logger.info("inner %s", "line", extra={"content": CONTENT, "password": PASSWORD})
        logger.warning("outer", extra={"run_id": "run_given"})
    logger.debug("outside")
    inner, outer, outside = parsed(buffer)
    assert inner == {
        "time": inner["time"],
        "level": "INFO",
        "logger": "parley.tests.logs",
        "message": "inner line",
        "request_id": "r1",
        "trace_id": TRACE_ID,
        "run_id": "run_1",
        "user_id": "user_1",
    }
    assert outer["run_id"] == "run_given" and "user_id" not in outer
    assert outside.keys() == {"time", "level", "logger", "message"}
    assert CONTENT not in buffer.getvalue() and PASSWORD not in buffer.getvalue()


def test_an_exception_is_one_line_with_its_traceback(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, buffer = captured
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("it failed\nacross lines")
    assert len(buffer.getvalue().splitlines()) == 1
    (line,) = parsed(buffer)
    assert line["level"] == "ERROR" and line["message"] == "it failed\nacross lines"
    assert "Traceback" in line["exc_info"] and "RuntimeError: boom" in line["exc_info"]


def test_text_lines_carry_the_context_readably() -> None:
    record = logging.LogRecord("parley.x", logging.INFO, __file__, 1, "run %s", ("started",), None)
    with logs.bind(run_id="run_1", user_id="user_1"):
        line = logs.TextFormatter().format(record)
    assert TEXT_LINE.fullmatch(line)
    assert line.endswith(" INFO parley.x: run started [run_id=run_1 user_id=user_1]")


async def test_a_binding_holds_in_the_tasks_started_under_it_and_ends_with_its_block() -> None:
    async def seen() -> dict[str, str]:
        return logs.bound()

    with logs.bind(run_id="run_1"):
        task = asyncio.create_task(seen())
    assert await task == {"run_id": "run_1"}
    assert logs.bound() == {}
    with pytest.raises(TypeError, match="content"), logs.bind(content="hello"):
        pass


@pytest.mark.parametrize(
    ("header", "trace_id"),
    [
        (TRACEPARENT, TRACE_ID),
        (f" {TRACEPARENT} ", TRACE_ID),
        (f"01-{TRACE_ID}-00f067aa0ba902b7-01-more", TRACE_ID),  # a later version may add fields
        (None, None),
        ("", None),
        (TRACEPARENT.upper(), None),
        (f"00-{TRACE_ID}-00f067aa0ba902b7-01-more", None),
        (f"ff-{TRACE_ID}-00f067aa0ba902b7-01", None),
        (f"00-{'0' * 32}-00f067aa0ba902b7-01", None),
        (f"00-{TRACE_ID}-{'0' * 16}-01", None),
        (f"00-{TRACE_ID[:-1]}-00f067aa0ba902b7-01", None),
        (f"00-{TRACE_ID}-00f067aa0ba902b7", None),
        (f"00_{TRACE_ID}_00f067aa0ba902b7_01", None),
        (f"00-{TRACE_ID[:-1]}g-00f067aa0ba902b7-01", None),
    ],
)
def test_the_trace_id_of_a_traceparent_header(header: str | None, trace_id: str | None) -> None:
    assert logs.trace_id_of(header) == trace_id


@pytest.mark.slow
def test_log_level_warning_quiets_the_access_lines_too(tmp_path: Path) -> None:
    port = free_port()
    args = ["serve", "--engine", "fake", "--data-dir", str(tmp_path), "--port", str(port)]
    proc = Parley(["--log-level", "WARNING", *args], env={}, log=tmp_path / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready(base)
        for _ in range(3):
            assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
    finally:
        proc.stop()
    lines = json_lines(proc.log)
    assert not [line for line in lines if line["level"] in ("DEBUG", "INFO")], lines
