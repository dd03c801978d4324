"""Accessibility (issue 46): axe-core (npm, `make pytest` installs it under build/axe) run in
Chromium on every main screen, in both themes: signed out, a chat, an answer streaming,
search results, a temporary chat, a shared page, the account page, the admin console, and
the chat at phone width (the drawer open). No serious or critical violation anywhere; the
counts by impact, per screen, are written to build/axe-report/ and printed at the end of the
run. Then a keyboard-only session: sign up, send, stop, edit and search without a mouse."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from tests.builders import sqlite_url
from tests.e2e.conftest import PASSWORD, Server, ServerFactory, fake_engine, log_in
from tests.e2e.test_admin_ui import set_role
from tests.waiting import eventually_sync

Theme = Literal["light", "dark"]
ROOT = Path(__file__).resolve().parents[2]
AXE = Path(os.environ.get("PARLEY_TEST_AXE") or ROOT / "build/axe/node_modules/axe-core/axe.min.js")
REPORTS = ROOT / "build" / "axe-report"
BLOCKING = ("serious", "critical")
IMPACTS = ("minor", "moderate", "serious", "critical")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def axe_source() -> str:
    assert AXE.is_file(), f"axe-core is missing: run `make {AXE.relative_to(ROOT)}`"
    return AXE.read_text()


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> str:
    return sqlite_url(tmp_path_factory.mktemp("a11y-db"))


@pytest.fixture
def slow(servers: ServerFactory, database: str) -> Server:
    return servers(**fake_engine(ttft_ms=100, itl_ms=80, tokens=60), PARLEY_DATABASE_URL=database)


class Audit:
    """axe run on screens of one theme; what it found, by screen."""

    def __init__(self, source: str, theme: Theme) -> None:
        self.source = source
        self.theme = theme
        self.found: dict[str, list[dict[str, Any]]] = {}

    def check(self, page: Page, screen: str) -> None:
        page.evaluate(self.source)  # (the context bypasses the page's CSP for this)
        result = page.evaluate(
            "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        )
        self.found[screen] = [
            {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]]}
            for v in result
        ]

    def write(self) -> Path:
        REPORTS.mkdir(parents=True, exist_ok=True)
        lines = []
        for screen, violations in self.found.items():
            counts = {i: sum(v["impact"] == i for v in violations) for i in IMPACTS}
            said = ", ".join(f"{counts[i]} {i}" for i in reversed(IMPACTS))
            ids = ", ".join(sorted({f"{v['id']} ({v['impact']})" for v in violations})) or "-"
            lines.append(f"{self.theme:5} {screen:24} {said}   {ids}")
        path = REPORTS / f"{self.theme}.txt"
        path.write_text("\n".join(lines) + "\n")
        (REPORTS / f"{self.theme}.json").write_text(json.dumps(self.found, indent=1))
        return path

    def blocking(self) -> dict[str, list[dict[str, Any]]]:
        return {
            screen: bad
            for screen, violations in self.found.items()
            if (bad := [v for v in violations if v["impact"] in BLOCKING])
        }


def themed(browser: Browser, theme: Theme, **options: Any) -> BrowserContext:
    context = browser.new_context(
        color_scheme=theme,
        bypass_csp=True,
        **({"viewport": {"width": 1280, "height": 800}} | options),
    )
    context.set_default_timeout(30_000)
    return context


@pytest.fixture(params=["light", "dark"])
def audit(request: pytest.FixtureRequest, axe_source: str) -> Iterator[Audit]:
    found = Audit(axe_source, request.param)
    yield found
    found.write()


def test_no_serious_or_critical_violation_on_any_screen(
    browser: Browser, slow: Server, database: str, audit: Audit
) -> None:
    context = themed(browser, audit.theme)
    page = context.new_page()
    page.goto(slow.url)
    expect(page.locator("#auth")).to_be_visible()
    audit.check(page, "signed out")

    email = slow.new_email()
    api = log_in(context, slow, email)
    chat = api.post("/api/chats", {"title": "Rivers and seas"})
    api.wait_run(api.send(chat["id"], "/echo rivers run to the sea ```\ncode\n```")["run_id"])
    page.goto(f"{slow.url}/c/{chat['id']}")
    expect(page.locator("li.assistant .answer-meta")).to_be_visible()
    audit.check(page, "chat")

    page.get_by_role("textbox", name="Message").fill("tell me more about rivers")
    page.keyboard.press("Enter")
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_visible()
    audit.check(page, "streaming")
    page.get_by_role("button", name="Stop", exact=True).click()

    page.goto(slow.url)
    page.get_by_role("button", name="Temporary").click()
    page.get_by_role("textbox", name="Message").fill("/echo kept nowhere")
    page.keyboard.press("Enter")
    expect(page.locator("li.assistant")).to_have_attribute("data-status", "completed")
    audit.check(page, "temporary chat")

    page.get_by_role("searchbox", name="Search chats").fill("rivers")
    expect(page.locator(".search-link").first).to_be_visible()
    audit.check(page, "search")

    share = api.post(f"/api/chats/{chat['id']}/shares", {})
    page.goto(slow.url + share["url"])
    audit.check(page, "shared page")

    page.goto(f"{slow.url}/account")
    expect(page.locator("#me")).to_have_text(email)
    audit.check(page, "account")

    set_role(database, email, "admin")

    def console() -> bool:  # (a session's role is cached for a few seconds)
        page.goto(f"{slow.url}/admin")
        page.wait_for_load_state("networkidle")
        return page.url.endswith("/admin")

    eventually_sync(console, "the admin console to open", timeout=30, interval=1)
    expect(page.locator("#audit tbody tr").first).to_be_visible()
    audit.check(page, "admin console")

    phone = themed(browser, audit.theme, viewport={"width": 390, "height": 844}, is_mobile=True)
    phone.add_cookies(context.cookies())  # type: ignore[arg-type]
    small = phone.new_page()
    small.goto(f"{slow.url}/c/{chat['id']}")
    expect(small.locator("li.assistant").first).to_be_visible()
    audit.check(small, "phone: chat")
    small.get_by_role("button", name="Show chats").click()
    expect(small.locator("#sidebar.open")).to_be_visible()
    audit.check(small, "phone: chats drawer")

    report = audit.write()
    print(report.read_text())
    assert audit.blocking() == {}, json.dumps(audit.blocking(), indent=1)
    phone.close()
    context.close()


def test_a_keyboard_alone_signs_up_sends_stops_edits_and_searches(
    browser: Browser, slow: Server
) -> None:
    context = themed(browser, "light")
    page = context.new_page()
    page.goto(slow.url)
    keys = page.keyboard

    def tab_to(name: str, role: str = "button", limit: int = 60) -> None:
        """Tab until the element with this role and name has the focus (and is visibly so)."""
        reach(page.get_by_role(role, name=name, exact=True).first, limit)  # type: ignore[arg-type]

    def reach(target: Locator, limit: int = 60) -> None:
        for _ in range(limit):
            if target.evaluate("el => el === document.activeElement"):
                outline = target.evaluate("el => getComputedStyle(el).outlineStyle")
                assert outline != "none", "the focus is not visible"
                return
            keys.press("Tab")
        raise AssertionError(f"Tab never reached {target}")

    tab_to("Sign up")
    keys.press("Enter")
    tab_to("Email", "textbox")
    keys.type(slow.new_email())
    tab_to("Password", "textbox")
    keys.type(PASSWORD)
    keys.press("Enter")
    expect(page.locator("#shell")).to_be_visible()

    prompt = page.get_by_role("textbox", name="Message")
    expect(prompt).to_be_focused()  # the message box has the focus on arrival
    keys.type("/echo a long answer to stop " + "word " * 40)
    keys.press("Enter")
    answer = page.locator("li.assistant").last
    expect(answer.locator(".content")).to_contain_text("long answer")
    tab_to("Stop")
    keys.press("Enter")
    expect(answer).to_have_attribute("data-status", "cancelled")

    question = page.locator("li.user").last
    expect(question.get_by_role("button", name="Edit")).to_be_visible()
    tab_to("Edit")
    keys.press("Enter")
    editor = page.get_by_role("textbox", name="Edit your message")
    expect(editor).to_be_focused()
    keys.press("Control+a")
    keys.type("/echo edited by keyboard")
    keys.press("Enter")
    expect(page.locator("li.assistant", has_text="edited by keyboard")).to_have_attribute(
        "data-status", "completed"
    )

    tab_to("Search chats", "searchbox")
    keys.type("keyboard")
    expect(page.locator(".search-link").first).to_be_visible()
    reach(page.locator(".search-link").first)
    keys.press("Enter")
    expect(page.locator("li.message.search-hit")).to_be_visible()
    context.close()
