"""MCP servers that act as the user: OAuth 2.1 as the MCP spec describes, with the ``mcp``
SDK's own discovery rules and models.

Connecting (``begin`` then ``finish``, across the browser's trip to the authorization
server, on any api process): the server's protected-resource metadata (RFC 9728, found
from its 401's ``WWW-Authenticate`` or the well-known addresses), its authorization
server's metadata (RFC 8414, the issuer checked), a client (the operator's, or registered
once by dynamic client registration, RFC 7591, kept sealed), then the authorization
request with PKCE (S256), the RFC 8707 resource and a ``state`` that is the flow itself,
sealed and short-lived: the user it was begun for, the server, the PKCE verifier. The
callback opens it (another user's, an altered or an expired state is refused), checks
the RFC 9207 ``iss``, and trades the code for tokens, kept sealed per user and server.

Calling: the user's access token, refreshed when it is about to expire (and once more if
the server answers 401); a grant whose refresh is refused is deleted and the user must
connect again. A call made for user B reads only B's grant: there is no other path to a
token.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import AsyncGenerator
from datetime import datetime, timedelta
from urllib.parse import urlencode

import httpx2
from mcp.client.auth.utils import validate_authorization_response_iss
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from parley.domain import utcnow
from parley.errors import Conflict, InvalidRequest, NotFound
from parley.sealing import Sealer, Unsealable
from parley.store import tool_grants
from parley.store.database import Database
from parley.tools.oauth_client import (
    ConnectFailed,
    Discovered,
    TokenRefused,
    challenge,
    configured,
    discovery,
    register,
    token_request,
)
from parley.tools.settings import McpServerSettings

log = logging.getLogger(__name__)

REFRESH_AHEAD = timedelta(seconds=30)  # a token this close to its end is refreshed first


class NotConnected(Exception):
    """The user has not connected the server (or must connect it again)."""


class NotConnectedYet(Conflict):
    code = "tool_not_connected"


class BadConnectState(InvalidRequest):
    code = "invalid_state"


class McpOAuth:
    def __init__(self, servers: list[McpServerSettings], db: Database, secret_key: str) -> None:
        self._servers = {s.name: s for s in servers if s.oauth is not None}
        self._db = db
        self._state = Sealer(secret_key, "mcp-oauth-state")
        self._vault = Sealer(secret_key, "mcp-oauth-tokens")
        self._discovered: dict[str, Discovered] = {}
        self._refreshing: dict[tuple[str, str], asyncio.Lock] = {}

    def names(self) -> list[str]:
        return list(self._servers)

    def needs_user(self, server: str) -> bool:
        return server in self._servers

    async def connected(self, user_id: str) -> list[str]:
        async with self._db.transaction() as s:
            return [n for n in await tool_grants.servers_of(s, user_id) if n in self._servers]

    async def check_connected(self, user_id: str, tools: list[str]) -> None:
        """Conflict ``tool_not_connected`` for an ``mcp:<server>`` among ``tools`` that acts
        as the user and that this user has not connected."""
        wanted = [t.removeprefix("mcp:") for t in tools if t.startswith("mcp:")]
        needed = [name for name in wanted if name in self._servers]
        if not needed:
            return
        missing = sorted(set(needed) - set(await self.connected(user_id)))
        if missing:
            raise NotConnectedYet(
                f"connect {', '.join(missing)} first: it acts as you (POST "
                f"/api/tools/mcp/{missing[0]}/connect)",
                param="tools",
            )

    async def disconnect(self, user_id: str, server: str) -> None:
        self._server(server)
        async with self._db.transaction() as s:
            if not await tool_grants.forget_grant(s, user_id=user_id, server=server):
                raise NotFound(f"{server} is not connected", code="not_connected", param="server")

    async def begin(self, user_id: str, server: str, redirect_uri: str) -> str:
        """The authorization server's address to send the user's browser to."""
        settings = self._server(server)
        assert settings.oauth is not None
        async with self._http(settings) as http:
            found = await self._discover(http, settings)
            client = await self._client(http, settings, found, redirect_uri)
        verifier = secrets.token_urlsafe(64)
        state = self._state.seal(
            json.dumps({"u": user_id, "s": server, "v": verifier, "r": redirect_uri})
        )
        params = {
            "response_type": "code",
            "client_id": client.client_id,
            "redirect_uri": redirect_uri,
            "state": state,
            "code_challenge": challenge(verifier),
            "code_challenge_method": "S256",
        }
        if found.resource is not None:
            params["resource"] = found.resource
        if found.scope:
            params["scope"] = found.scope
        return f"{found.metadata.authorization_endpoint}?{urlencode(params)}"

    async def finish(self, user_id: str, state: str, code: str, iss: str | None) -> str:
        """The code traded for the user's tokens (kept sealed); the server's name."""
        flow = self._opened(user_id, state)
        settings = self._server(flow["s"])
        async with self._http(settings) as http:
            found = await self._discover(http, settings)
            try:
                validate_authorization_response_iss(iss, found.metadata)
            except Exception as e:
                raise BadConnectState(str(e), param="iss") from None
            client = await self._client(http, settings, found, flow["r"])
            form = {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": flow["r"],
                "code_verifier": flow["v"],
            }
            token = await token_request(http, found, client, form)
        await self._keep(user_id, settings.name, token)
        return settings.name

    async def token(self, user_id: str, server: str, *, refresh: bool = False) -> str:
        """The user's access token for the server (refreshed first when it is about to
        expire, or when ``refresh``); NotConnected if there is none to be had."""
        lock = self._refreshing.setdefault((user_id, server), asyncio.Lock())
        async with lock:
            token, expires_at, updated = await self._grant(user_id, server)
            stale = expires_at is not None and expires_at - REFRESH_AHEAD <= utcnow()
            if not (refresh or stale):
                return token.access_token
            return await self._refreshed(user_id, server, token, updated)

    async def _refreshed(
        self, user_id: str, server: str, token: OAuthToken, updated: datetime
    ) -> str:
        settings = self._server(server)
        if token.refresh_token is None:
            raise NotConnected(f"{server}'s access has ended: connect it again")
        form = {"grant_type": "refresh_token", "refresh_token": token.refresh_token}
        async with self._http(settings) as http:
            found = await self._discover(http, settings)
            client = await self._stored_client(settings.name)
            if client is None:
                raise NotConnected(f"connect {server} again")
            try:
                fresh = await token_request(http, found, client, form)
            except TokenRefused as e:
                if e.error == "invalid_client":  # it forgot parley: register again next time
                    await self._forget_client(server)
                return await self._after_refused_refresh(user_id, server, updated)
        if fresh.refresh_token is None:  # RFC 6749 §6: the old one stays good
            fresh.refresh_token = token.refresh_token
        await self._keep(user_id, server, fresh)
        return fresh.access_token

    async def _after_refused_refresh(self, user_id: str, server: str, updated: datetime) -> str:
        """Another process may have refreshed (and rotated) the grant meanwhile: its token
        is used; otherwise the grant is deleted, and the user must connect again."""
        token, _, now_updated = await self._grant(user_id, server)
        if now_updated > updated:
            return token.access_token
        async with self._db.transaction() as s:
            await tool_grants.forget_grant(s, user_id=user_id, server=server)
        raise NotConnected(f"{server} refused to renew access: connect it again")

    async def _grant(
        self, user_id: str, server: str
    ) -> tuple[OAuthToken, datetime | None, datetime]:
        async with self._db.transaction() as s:
            row = await tool_grants.grant(s, user_id=user_id, server=server)
        if row is None:
            raise NotConnected(f"connect {server} first (Settings → Tools)")
        try:
            token = OAuthToken.model_validate_json(self._vault.open(row.sealed))
        except Unsealable:  # the secret key changed: the grant cannot be read
            raise NotConnected(f"connect {server} again") from None
        return token, row.expires_at, row.updated_at

    async def _keep(self, user_id: str, server: str, token: OAuthToken) -> None:
        expires_at = None
        if token.expires_in is not None:
            expires_at = utcnow() + timedelta(seconds=int(token.expires_in))
        sealed = self._vault.seal(token.model_dump_json())
        async with self._db.transaction() as s:
            await tool_grants.keep_grant(
                s, user_id=user_id, server=server, sealed=sealed, expires_at=expires_at
            )

    def _opened(self, user_id: str, state: str) -> dict[str, str]:
        """The flow a state carries, if it was begun for this user, here, not too long ago."""
        try:
            flow = json.loads(self._state.open(state, self._connect_seconds()))
        except (Unsealable, ValueError):
            raise BadConnectState(
                "the connection's state is not valid (altered, or too old): connect again",
                param="state",
            ) from None
        if not isinstance(flow, dict) or flow.get("u") != user_id:
            raise BadConnectState("the connection was begun by another user", param="state")
        return flow

    def _connect_seconds(self) -> float:
        return max(
            (s.oauth.connect_seconds for s in self._servers.values() if s.oauth), default=600
        )

    def _server(self, name: str) -> McpServerSettings:
        server = self._servers.get(name)
        if server is None:
            raise NotFound(
                f"there is no MCP server {name!r} to connect", code="no_such_server", param="server"
            )
        return server

    @staticmethod
    def _http(server: McpServerSettings) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(timeout=server.timeout_seconds, follow_redirects=False)

    async def _discover(self, http: httpx2.AsyncClient, server: McpServerSettings) -> Discovered:
        """The server's authorization server and resource, found as the SDK finds them."""
        found = self._discovered.get(server.name)
        if found is not None:
            return found
        assert server.url is not None and server.oauth is not None
        try:
            found = await discovery(http, server.url, server.oauth)
        except httpx2.HTTPError as e:
            raise ConnectFailed(f"{server.name} could not be reached: {type(e).__name__}") from e
        self._discovered[server.name] = found
        return found

    async def _client(
        self,
        http: httpx2.AsyncClient,
        server: McpServerSettings,
        found: Discovered,
        redirect_uri: str,
    ) -> OAuthClientInformationFull:
        """The operator's client, or the one parley registered for this redirect address
        (registered now if there is none)."""
        assert server.oauth is not None
        own = configured(server.oauth, redirect_uri)
        if own is not None:
            return own
        async with self._db.transaction() as s:
            row = await tool_grants.client(s, server.name)
        if row is not None and row.redirect_uri == redirect_uri:
            return OAuthClientInformationFull.model_validate_json(self._vault.open(row.sealed))
        registered = await register(http, server, found, redirect_uri)
        async with self._db.transaction() as s:
            sealed = self._vault.seal(registered.model_dump_json())
            await tool_grants.keep_client(s, server.name, redirect_uri, sealed)
        return registered

    async def _forget_client(self, server: str) -> None:
        async with self._db.transaction() as s:
            await tool_grants.forget_client(s, server)

    async def _stored_client(self, server: str) -> OAuthClientInformationFull | None:
        settings = self._server(server)
        assert settings.oauth is not None
        async with self._db.transaction() as s:
            row = await tool_grants.client(s, server)
        redirect = row.redirect_uri if row is not None else "http://localhost/"
        own = configured(settings.oauth, redirect)
        if own is not None or row is None:
            return own
        return OAuthClientInformationFull.model_validate_json(self._vault.open(row.sealed))


class UserBearer(httpx2.Auth):
    """An MCP request made as the user: their access token, and one refresh on a 401."""

    def __init__(self, oauth: McpOAuth, user_id: str, server: str) -> None:
        self._oauth, self._user_id, self._server = oauth, user_id, server

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self._oauth.token(self._user_id, self._server)
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            token = await self._oauth.token(self._user_id, self._server, refresh=True)
            request.headers["Authorization"] = f"Bearer {token}"
            yield request
