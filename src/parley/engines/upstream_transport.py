"""The upstream client's transport: httpx's requests and responses, aiohttp's HTTP/1.1.

httpx's own transport (httpcore over h11 and anyio) parses a streamed answer in Python, one
event per chunk, and an upstream sends a chunk per token: it was about 1 ms of CPU per
32-token answer in the worker (``bench/gateway.py``, issue 48). aiohttp parses HTTP in C
(llhttp) and hands over whatever arrived in one piece. The engine keeps httpx's API (its
``Request``, ``Response``, errors and the ``transport=`` seam its tests use); only the bytes
move through aiohttp, with httpx's semantics kept where the two differ:

* no redirect followed, no cookie kept, nothing decompressed here (httpx does each itself,
  from the response's headers, as with its own transport);
* the request's timeouts (``connect``, ``read``; ``write`` and ``pool`` have no aiohttp
  counterpart for a body sent at once from memory and an unbounded pool);
* a body read to its end gives its connection back to the pool (keep-alive); a body closed
  before its end closes the connection, so the server sees its client leave;
* aiohttp's errors raised as httpx's (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
  ``RemoteProtocolError``, ``ReadError``), which the engine maps for the run and the router;
* a proxy named by the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``,
  ``NO_PROXY``), as httpx's ``trust_env``: read once per origin, at its first request
  (aiohttp's own ``trust_env`` reads the environment and ``~/.netrc`` in a thread on every
  request: an eighth of a process's CPU under load).

The session is made in the loop of the first request (aiohttp binds it to that loop) and
again if that loop has gone (tests run one loop per test).
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import aiohttp
import httpx
from yarl import URL

_KEEPALIVE_SECONDS = 5.0  # as httpx's default keepalive_expiry


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncClient``'s transport over one ``aiohttp.ClientSession``."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxies: dict[tuple[str, str, int | None], str | None] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        session = await self._session_here()
        timeout = request.extensions.get("timeout", {})
        body = await request.aread()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        with _as_httpx(request, sending=True):
            answer = await session.request(
                request.method,
                URL(str(request.url), encoded=True),
                headers=headers,
                data=body or None,
                proxy=self._proxy_for(request.url),
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=timeout.get("connect"), sock_read=timeout.get("read")
                ),
            )
        return httpx.Response(
            answer.status,
            headers=list(answer.raw_headers),
            stream=_Body(answer, request),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": _reason(answer)},
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    def _proxy_for(self, url: httpx.URL) -> str | None:
        origin = (url.scheme, url.host, url.port)
        if origin not in self._proxies:
            self._proxies[origin] = _environment_proxy(url)
        return self._proxies[origin]

    async def _session_here(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            if self._session is not None and self._loop is loop:
                await self._session.close()
            self._loop = loop
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0,  # unbounded: the router's slots bound what is in flight
                    keepalive_timeout=_KEEPALIVE_SECONDS,
                    ssl=httpx.create_ssl_context(),  # certifi's roots, SSL_CERT_FILE: as httpx
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                trust_env=False,  # the environment's proxy: _proxy_for
            )
        return self._session


def _environment_proxy(url: httpx.URL) -> str | None:
    """The proxy the environment names for ``url``'s scheme, unless ``NO_PROXY`` spares it."""
    proxies = urllib.request.getproxies_environment()
    if urllib.request.proxy_bypass_environment(url.host, proxies):  # type: ignore[attr-defined]
        return None
    return proxies.get(url.scheme) or proxies.get("all")


def _reason(answer: aiohttp.ClientResponse) -> bytes:
    return (answer.reason or "").encode("latin-1", "replace")


class _Body(httpx.AsyncByteStream):
    """A response's body as it arrives; its connection kept only if it is read through."""

    def __init__(self, answer: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._answer = answer
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx(self._request, sending=False):
            async for piece in self._answer.content.iter_any():
                yield piece

    async def aclose(self) -> None:
        # read through, its connection went back to the pool at the body's end (aiohttp
        # releases it there); left early, it is closed, so the server frees what it holds
        self._answer.close()


@contextmanager
def _as_httpx(request: httpx.Request, *, sending: bool) -> Iterator[None]:
    """aiohttp's errors as the httpx errors its own transport raises for the same failure."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as e:
        raise httpx.ConnectTimeout(str(e) or "connecting timed out", request=request) from e
    except aiohttp.SocketTimeoutError as e:
        raise httpx.ReadTimeout(str(e) or "reading timed out", request=request) from e
    except aiohttp.ClientConnectorError as e:
        raise httpx.ConnectError(str(e), request=request) from e
    except aiohttp.ServerDisconnectedError as e:
        raise httpx.RemoteProtocolError(
            "the server disconnected without sending a complete response", request=request
        ) from e
    except aiohttp.ClientPayloadError as e:
        raise httpx.RemoteProtocolError(
            f"the connection closed before the body's end: {e}", request=request
        ) from e
    except aiohttp.InvalidURL as e:
        raise httpx.UnsupportedProtocol(f"not a URL this client can reach: {e}") from e
    except (aiohttp.ClientError, OSError) as e:
        kind = httpx.ConnectError if sending else httpx.ReadError
        raise kind(f"{type(e).__name__}: {e}", request=request) from e
