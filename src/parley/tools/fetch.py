"""``fetch_url``: a web page's readable text for the model, fetched so that no address the
server can reach but the public could not is ever asked.

Each hop (the URL, then every redirect, followed by hand) is checked before a byte is sent:
http or https only, no credentials in the URL; its host resolved (off the event loop) and
every address it resolves to must be public (``ipaddress``'s ``is_global``: no loopback,
private, link-local — 169.254.169.254, the clouds' metadata service, among them —, shared,
reserved or multicast range; an IPv4 address inside IPv6 is judged as IPv4) unless the
operator allow-lists its range. The connection then goes to the address that was checked
(the URL's host kept for ``Host`` and TLS), so a name that resolves to another address a
moment later (DNS rebinding) cannot redirect it. The body is read up to ``max_bytes`` within
one deadline for the whole fetch; HTML is reduced to its readable text in a thread
(``readable.py``), bounded by that size.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from parley.engines.tools import FunctionSpec, ToolSpec
from parley.tools.interface import ToolContext, ToolOutcome, ToolStatus
from parley.tools.readable import readable_text
from parley.tools.settings import FetchSettings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolve = Callable[[str, int], Awaitable[list[str]]]

SPEC = ToolSpec(
    type="function",
    function=FunctionSpec(
        name="fetch_url",
        description="Fetch a public web page (http or https) and read its text.",
        parameters={
            "type": "object",
            "properties": {"url": {"type": "string", "maxLength": 2000}},
            "required": ["url"],
            "additionalProperties": False,
        },
    ),
)
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")


class Refused(Exception):
    """A URL or address the fetch will not ask."""


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # the last hop's
    status: int
    content_type: str
    text: str
    truncated: bool


async def resolve_host(host: str, port: int) -> list[str]:
    """The addresses a name resolves to (the system's resolver, off the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class FetchUrl:
    """The ``fetch_url`` tool."""

    def __init__(
        self,
        settings: FetchSettings,
        *,
        resolve: Resolve = resolve_host,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self._allowed = [ipaddress.ip_network(n, strict=False) for n in settings.allow_networks]
        self._resolve = resolve
        self._client = httpx.AsyncClient(
            follow_redirects=False, transport=transport, headers={"User-Agent": settings.user_agent}
        )

    @property
    def spec(self) -> ToolSpec:
        return SPEC

    async def close(self) -> None:
        await self._client.aclose()

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        url = arguments.get("url")
        if not isinstance(url, str) or not url:
            return ToolOutcome.refused("fetch_url needs a url")
        try:
            async with asyncio.timeout(self.settings.timeout_seconds):
                fetched = await self.fetch(url)
        except Refused as e:
            return ToolOutcome.refused(str(e))
        except TimeoutError:
            return ToolOutcome(
                ToolStatus.TIMEOUT, f"no answer within {self.settings.timeout_seconds:g} s"
            )
        except httpx.HTTPError as e:
            return ToolOutcome.error(f"the fetch failed: {type(e).__name__}")
        return _outcome(fetched, self.settings.max_text_chars)

    async def fetch(self, url: str) -> Fetched:
        """The page at ``url``, redirects followed and each checked; Refused for an address
        or URL the fetch will not ask."""
        for _ in range(self.settings.max_redirects + 1):
            response = await self._get(url)
            location = response.headers.get("location")
            if response.is_redirect and location:
                await response.aclose()
                url = urljoin(url, location)
                continue
            return await self._read(url, response)
        raise Refused(f"more than {self.settings.max_redirects} redirects")

    async def _get(self, url: str) -> httpx.Response:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise Refused(f"only http and https URLs are fetched, not {parts.scheme or 'none'!r}")
        if parts.username or parts.password:
            raise Refused("a URL with credentials is not fetched")
        host = parts.hostname
        if not host:
            raise Refused("the URL names no host")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        address = await self._checked(host, port)
        pinned = _with_host(url, address, port)
        headers = {"Host": parts.netloc.rsplit("@", 1)[-1]}
        extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
        request = self._client.build_request("GET", pinned, headers=headers, extensions=extensions)
        return await self._client.send(request, stream=True)

    async def _checked(self, host: str, port: int) -> Address:
        """The address to connect to: the first the host resolves to, every one of them
        public (or allow-listed); Refused otherwise."""
        try:
            literal: Address | None = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            found = [literal]
        else:
            try:
                found = [
                    ipaddress.ip_address(a.split("%")[0]) for a in await self._resolve(host, port)
                ]
            except OSError as e:
                raise Refused(f"{host} does not resolve: {e.strerror or e}") from None
        if not found:
            raise Refused(f"{host} does not resolve")
        for address in found:
            if not self._public(address):
                raise Refused(f"{host} is not a public address ({address}): not fetched")
        return found[0]

    def _public(self, address: Address) -> bool:
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        judged: Address = mapped or address
        if any(judged in network for network in self._allowed):
            return True
        return judged.is_global and not judged.is_multicast

    async def _read(self, url: str, response: httpx.Response) -> Fetched:
        limit, chunks, size, truncated = self.settings.max_bytes, [], 0, False
        try:
            async for chunk in response.aiter_bytes():
                chunks.append(chunk[: limit - size])
                size += len(chunk)
                if size >= limit:
                    truncated = size > limit
                    break
        finally:
            await response.aclose()
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if not kind.startswith(TEXT_TYPES):
            raise Refused(f"the page is {kind or 'of no stated type'}, not text")
        body = b"".join(chunks).decode(response.encoding or "utf-8", errors="replace")
        text = await asyncio.to_thread(readable_text, body) if "html" in kind else body
        return Fetched(url, response.status_code, kind, text, truncated)


def _with_host(url: str, address: Address, port: int) -> str:
    """``url`` with its host replaced by the checked address (its path and query kept)."""
    parts = urlsplit(url)
    host = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    return parts._replace(netloc=f"{host}:{port}").geturl()


def _outcome(fetched: Fetched, max_chars: int) -> ToolOutcome:
    text = fetched.text[:max_chars]
    cut = fetched.truncated or len(fetched.text) > max_chars
    head = f"{fetched.url} ({fetched.status}, {fetched.content_type}{', cut short' if cut else ''})"
    status = ToolStatus.OK if fetched.status < 400 else ToolStatus.ERROR
    return ToolOutcome(status, f"{head}\n\n{text}")
