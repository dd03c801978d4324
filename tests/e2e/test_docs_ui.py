"""/docs in a real headless Chromium with no network beyond the server: Swagger UI renders
from the package's own files, under the app's Content-Security-Policy, with no violation."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from playwright.sync_api import BrowserContext, ConsoleMessage, Page, Route, expect

from tests.e2e.conftest import Server, shot

pytestmark = pytest.mark.slow


def test_docs_render_offline_under_the_csp(
    context: BrowserContext, page: Page, server: Server
) -> None:
    server_host = urlsplit(server.url).netloc
    elsewhere: list[str] = []

    def only_the_server(route: Route) -> None:
        if urlsplit(route.request.url).netloc == server_host:
            route.continue_()
        else:  # no network: anything off this machine fails, as it would offline
            elsewhere.append(route.request.url)
            route.abort("internetdisconnected")

    context.route("**/*", only_the_server)
    console: list[str] = []

    def keep(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            console.append(message.text)

    page.on("console", keep)
    response = page.goto(f"{server.url}/docs")
    assert response is not None and response.status == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("parley")
    operations = page.locator(".swagger-ui .opblock")
    expect(operations.first).to_be_visible()
    assert operations.count() >= 10
    # an operation opens, and its parameters are shown
    page.locator(".opblock-summary-path", has_text="/api/runs/{run_id}/events").first.click()
    expect(page.get_by_text("Last-Event-ID").first).to_be_visible()
    shot(page, "docs")
    assert elsewhere == [], f"/docs reached beyond the server: {elsewhere}"
    violations = [m for m in console if "Content Security Policy" in m or "Refused" in m]
    assert violations == [], violations
