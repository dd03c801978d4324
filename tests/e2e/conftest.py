"""Browser tests: Playwright for Python driving Debian's Chromium against `parley serve`.

Each server is a real `parley serve --engine fake` process (SQLite, in-process bus) with
the fake engine's pace set per test module. Screenshots go to ``PARLEY_SCREENSHOT_DIR``
(default ``build/screenshots``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from tests.processes import Parley, free_port
from tests.waiting import eventually_sync

CHROMIUM = os.environ.get("PARLEY_TEST_CHROMIUM", "/usr/bin/chromium")
# The flags that work on this kind of machine: no sandbox as root, no background traffic
# to hosts the closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(os.environ.get("PARLEY_SCREENSHOT_DIR", "build/screenshots"))
PASSWORD = "correct horse battery staple"
ANSWER_TOKENS = 60  # the default server's answers

# How long Playwright waits for an expectation, an action or a page function: answers take
# about 4 s here (more on a busy machine), so Playwright's 5 s default for expect() is not
# enough. A deadline, not a timing claim: the tests assert no timings.
PLAYWRIGHT_TIMEOUT_MS = 30_000
expect.set_options(timeout=PLAYWRIGHT_TIMEOUT_MS)


@dataclass
class Server:
    """A running `parley serve` and the settings it was started with."""

    url: str
    proc: Parley
    users: int = field(default=0)
    data_dir: Path | None = None  # its PARLEY_DATA_DIR (the SQLite database's)

    def new_email(self) -> str:
        self.users += 1
        return f"user{self.users}-{time.monotonic_ns()}@example.com"  # unique, not a timing


ServerFactory = Callable[..., Server]


# Module scope, not session: sync Playwright runs an event loop in this thread while it is
# open, and the async tests that follow in the same session need the thread's loop free.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
    )
    yield browser
    browser.close()


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    """Start (once per distinct settings) a `parley serve --engine fake`."""
    running: dict[str, Server] = {}

    def start(**settings: str) -> Server:
        key = json.dumps(settings, sort_keys=True)
        if key in running:
            return running[key]
        tmp = tmp_path_factory.mktemp("serve")
        port = free_port()
        env = {"PARLEY_DATA_DIR": str(tmp / "data"), **settings}
        proc = Parley(["serve", "--engine", "fake", "--port", str(port)], env, tmp / "serve.log")
        url = f"http://127.0.0.1:{port}"
        proc.wait_ready(url)
        running[key] = Server(url, proc, data_dir=tmp / "data")
        return running[key]

    yield start
    for server in running.values():
        server.proc.stop()


def fake_engine(ttft_ms: int, itl_ms: int, tokens: int, slots: int = 8) -> dict[str, str]:
    return {
        "PARLEY_FAKE_ENGINE__TIME_TO_FIRST_TOKEN_MS": str(ttft_ms),
        "PARLEY_FAKE_ENGINE__INTER_TOKEN_LATENCY_MS": str(itl_ms),
        "PARLEY_FAKE_ENGINE__OUTPUT_TOKENS": str(tokens),
        "PARLEY_FAKE_ENGINE__SLOTS": str(slots),
    }


@pytest.fixture
def server(servers: ServerFactory) -> Server:
    """The default: answers of ANSWER_TOKENS at 60 ms each (about 3.6 s), slow enough to
    watch, reload and come back to mid-answer even on a busy machine."""
    return servers(**fake_engine(ttft_ms=150, itl_ms=60, tokens=ANSWER_TOKENS))


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.set_default_timeout(PLAYWRIGHT_TIMEOUT_MS)
    yield ctx
    ctx.close()


@pytest.fixture
def browser_context_narrow(browser: Browser) -> Iterator[BrowserContext]:
    """A phone-sized window."""
    ctx = browser.new_context(viewport={"width": 390, "height": 780}, is_mobile=True)
    ctx.set_default_timeout(PLAYWRIGHT_TIMEOUT_MS)
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Iterator[Page]:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    assert errors == [], f"uncaught errors in the page: {errors}"


def shot(page: Page, name: str) -> Path:
    """Save a screenshot of the page as build/screenshots/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


class Api:
    """The same user as the page, through the HTTP API (httpx with the user's token)."""

    def __init__(self, base_url: str, token: str) -> None:
        self.client = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def get(self, path: str, **params: Any) -> Any:
        r = self.client.get(path, params=params)
        assert r.status_code == 200, r.text
        return r.json()

    def post(self, path: str, body: dict[str, Any], **headers: str) -> Any:
        r = self.client.post(path, json=body, headers=headers)
        assert r.status_code in (200, 201, 202), r.text
        return r.json()

    def send(self, chat_id: str, content: str) -> Any:
        """Send a prompt without streaming (202): the run's ids."""
        body = {"content": content}
        return self.post(f"/api/chats/{chat_id}/messages", body, Accept="application/json")

    def messages(self, chat_id: str) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = self.get(
            f"/api/chats/{chat_id}/messages", order="asc", limit=100
        )["data"]
        return data

    def wait_run(self, run_id: str, timeout: float = 30) -> dict[str, Any]:
        def ended() -> dict[str, Any] | None:
            run: dict[str, Any] = self.get(f"/api/runs/{run_id}")
            return (
                run if run["status"] in ("completed", "cancelled", "failed", "rejected") else None
            )

        run = eventually_sync(ended, f"run {run_id} to end", timeout=timeout, interval=0.1)
        assert run is not None
        return run


def log_in(context: BrowserContext, server: Server, email: str | None = None) -> Api:
    """Sign a new user up through the API; the browser context gets the session cookies."""
    email = email or server.new_email()
    r = context.request.post(
        f"{server.url}/api/auth/signup", data={"email": email, "password": PASSWORD}
    )
    assert r.status == 201, r.text()
    return Api(server.url, r.json()["token"])
