"""``fetch_url`` (issue 43): a page's readable text; loopback, private, link-local and
metadata addresses refused — given as such, behind a name, or behind a redirect from an
allowed address — before any request reaches them; the connection pinned to the address
that was checked; size, time, type and redirect limits as outcomes, not errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from parley.tools.fetch import FetchUrl
from parley.tools.interface import ToolContext, ToolStatus
from parley.tools.settings import FetchSettings
from tests.builders import served

CONTEXT = ToolContext(user_id="user_1", chat_id=None, run_id="run_1")
PAGE = """<html><head><title>Herons</title><script>var secret = "no";</script>
<style>p { color: red }</style></head><body><nav>Home | About</nav>
<h1>Grey herons</h1><p>They nest in <b>colonies</b>, high in trees.</p>
<ul><li>Wingspan: 1.9 m</li></ul></body></html>"""


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, list[str]]]:
    """A local web server (it stands in for the public web where the test allows
    127.0.0.1), and the paths it was asked for."""
    asked: list[str] = []

    async def page(request: Request) -> Response:
        asked.append(request.url.path)
        path = request.url.path
        if path == "/page":
            return Response(PAGE, media_type="text/html")
        if path.startswith("/to/"):
            return RedirectResponse(request.query_params["url"], status_code=302)
        if path == "/big":
            return PlainTextResponse("x" * 3_000_000)
        if path == "/slow":
            await asyncio.sleep(5)
            return PlainTextResponse("late")
        if path == "/binary":
            return Response(b"\x00\x01", media_type="application/octet-stream")
        if path == "/loop":
            return RedirectResponse("/loop", status_code=302)
        return PlainTextResponse("not here", status_code=404)

    app = Starlette(routes=[Route("/{path:path}", page)])
    async with served(app) as base:
        yield base, asked


def fetcher(**settings: Any) -> FetchUrl:
    return FetchUrl(FetchSettings(**settings))


async def call(tool: FetchUrl, url: str) -> tuple[ToolStatus, str]:
    try:
        outcome = await tool.call({"url": url}, CONTEXT)
    finally:
        await tool.close()
    return outcome.status, outcome.content


LOCAL = {"allow_networks": ["127.0.0.1/32"]}


async def test_a_page_comes_back_as_its_readable_text(site: tuple[str, list[str]]) -> None:
    base, _ = site
    status, text = await call(fetcher(**LOCAL), f"{base}/page")
    assert status is ToolStatus.OK
    assert "Grey herons" in text and "They nest in colonies, high in trees." in text
    assert "Wingspan: 1.9 m" in text
    assert "secret" not in text and "color" not in text and "Home | About" not in text


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{port}/page",
        "http://[::1]:{port}/page",
        "http://localhost:{port}/page",  # a name resolving to loopback
        "http://10.0.0.8/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]:{port}/page",  # IPv4 inside IPv6
        "http://0.0.0.0:{port}/page",
        "http://100.64.0.1/",  # shared (carrier-grade NAT) space
    ],
)
async def test_addresses_the_public_cannot_reach_are_refused(
    site: tuple[str, list[str]], target: str
) -> None:
    base, asked = site
    port = base.rsplit(":", 1)[1]
    status, text = await call(fetcher(timeout_seconds=3), target.format(port=port))
    assert status is ToolStatus.REFUSED, text
    assert "not a public address" in text
    assert asked == []  # nothing reached the server


@pytest.mark.parametrize(
    "hop",
    [
        "http://10.0.0.8/admin",
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.2:{port}/page",  # loopback, outside the one address allowed
        "http://[::1]:{port}/page",
    ],
)
async def test_a_redirect_to_a_private_address_is_refused(
    site: tuple[str, list[str]], hop: str
) -> None:
    base, asked = site
    port = base.rsplit(":", 1)[1]
    target = httpx.URL(f"{base}/to/x", params={"url": hop.format(port=port)})
    status, text = await call(fetcher(**LOCAL, timeout_seconds=3), str(target))
    assert status is ToolStatus.REFUSED, text
    assert asked == ["/to/x"]  # the allowed first hop only


async def test_the_connection_goes_to_the_address_that_was_checked() -> None:
    """DNS rebinding: the name is resolved once, checked, and that address is asked (the
    name kept as Host); a second lookup that would answer loopback is never made."""
    lookups: list[str] = []
    answers = iter([["93.184.216.34"], ["127.0.0.1"]])

    async def resolve(host: str, port: int) -> list[str]:
        lookups.append(host)
        return next(answers)

    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="hello", headers={"content-type": "text/plain"})

    tool = FetchUrl(FetchSettings(), resolve=resolve, transport=httpx.MockTransport(handler))
    status, text = await call(tool, "http://rebind.example/a?b=1")
    assert status is ToolStatus.OK and text.endswith("hello")
    assert lookups == ["rebind.example"]
    (request,) = seen
    assert (request.url.host, request.url.path, request.url.query) == (
        "93.184.216.34",
        "/a",
        b"b=1",
    )
    assert request.headers["host"] == "rebind.example"


@pytest.mark.parametrize(
    ("path", "settings", "status", "said"),
    [
        ("/big", {"max_bytes": 100_000}, ToolStatus.OK, "cut short"),
        ("/slow", {"timeout_seconds": 0.5}, ToolStatus.TIMEOUT, "no answer within 0.5 s"),
        ("/binary", {}, ToolStatus.REFUSED, "not text"),
        ("/loop", {"max_redirects": 3}, ToolStatus.REFUSED, "more than 3 redirects"),
        ("/missing", {}, ToolStatus.ERROR, "(404"),
    ],
)
async def test_limits_end_a_fetch_with_an_outcome(
    site: tuple[str, list[str]],
    path: str,
    settings: dict[str, Any],
    status: ToolStatus,
    said: str,
) -> None:
    base, _ = site
    got, text = await call(fetcher(**LOCAL, **settings), f"{base}{path}")
    assert got is status and said in text, text
    assert len(text) <= 20_000 + 200


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("file:///etc/passwd", "only http and https"),
        ("ftp://example.com/x", "only http and https"),
        ("http://user:pw@example.com/", "credentials"),
        ("http:///nohost", "no host"),
        ("http://no-such-host.invalid/", "does not resolve"),
    ],
)
async def test_urls_that_are_not_fetched(url: str, said: str) -> None:
    status, text = await call(fetcher(), url)
    assert status is ToolStatus.REFUSED and said in text, text


def test_a_bad_allowed_range_is_a_settings_error() -> None:
    make: Callable[..., FetchSettings] = FetchSettings
    with pytest.raises(ValueError, match=r"10\.0\.0\.0/33"):
        make(allow_networks=["10.0.0.0/33"])
