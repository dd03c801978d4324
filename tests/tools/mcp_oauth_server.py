"""A real MCP server that acts as its users, with its own authorization server, written with
the ``mcp`` SDK (``MCPServer`` with an ``OAuthAuthorizationServerProvider``: the SDK serves
the metadata, ``/register``, ``/authorize`` and ``/token``, and checks PKCE):

    python -m tests.tools.mcp_oauth_server PORT [TOKEN_SECONDS]

Signing in is a page of its own: ``/authorize`` sends the browser to ``/login?ticket=…``
(a form asking who signs in), and ``/login?ticket=…&user=<name>`` answers as that user.
Access tokens last TOKEN_SECONDS (default 3600); refresh tokens rotate. Its tools:
``whoami`` (the user the call's token belongs to) and ``stats`` (how many tokens it issued
and refreshed, and the users whose tokens it has seen)."""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
from urllib.parse import urlencode

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    OAuthAuthorizationServerProvider,
    RefreshToken,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response


class Provider(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]):
    def __init__(self, issuer: str, token_seconds: int) -> None:
        self.issuer = issuer
        self.token_seconds = token_seconds
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.tickets: dict[str, tuple[str, AuthorizationParams]] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.counts = {"issued": 0, "refreshed": 0}
        self.seen: list[str] = []

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        ticket = secrets.token_urlsafe(16)
        assert client.client_id is not None
        self.tickets[ticket] = (client.client_id, params)
        return f"{self.issuer}/login?ticket={ticket}"

    def signed_in(self, ticket: str, user: str) -> str:
        client_id, params = self.tickets.pop(ticket)
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=user,
        )
        query = {"code": code, **({"state": params.state} if params.state else {})}
        return f"{params.redirect_uri}?{urlencode(query)}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        found = self.codes.get(authorization_code)
        return found if found is not None and found.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self.counts["issued"] += 1
        return self._tokens(
            client,
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject,
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        found = self.refresh.get(refresh_token)
        return found if found is not None and found.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)  # rotated: the old one is spent
        self.counts["refreshed"] += 1
        return self._tokens(
            client, scopes or refresh_token.scopes, refresh_token.resource, refresh_token.subject
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _tokens(
        self,
        client: OAuthClientInformationFull,
        scopes: list[str],
        resource: str | None,
        subject: str | None,
    ) -> OAuthToken:
        assert client.client_id is not None
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires = int(time.time()) + self.token_seconds
        self.access[access] = AccessToken(
            token=access,
            client_id=client.client_id,
            scopes=scopes,
            expires_at=expires,
            resource=resource,
            subject=subject,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh,
            client_id=client.client_id,
            scopes=scopes,
            resource=resource,
            subject=subject,
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.token_seconds,
            refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )


def build(port: int, token_seconds: int) -> MCPServer:
    issuer = f"http://127.0.0.1:{port}"
    provider = Provider(issuer, token_seconds)
    server = MCPServer(
        "notes",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=issuer,
            resource_server_url=f"{issuer}/mcp",
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=["notes"]
            ),
            revocation_options=RevocationOptions(enabled=True),
            required_scopes=["notes"],
            validate_token_resource=True,
        ),
    )

    @server.custom_route("/login", methods=["GET"])  # type: ignore[untyped-decorator]
    async def login(request: Request) -> Response:
        ticket, user = request.query_params.get("ticket", ""), request.query_params.get("user")
        if ticket not in provider.tickets:
            return JSONResponse({"error": "unknown ticket"}, status_code=400)
        if not user:  # the sign-in page a browser sees
            return HTMLResponse(
                "<!doctype html><title>Notes sign-in</title><form method=get action=/login>"
                f"<input type=hidden name=ticket value={ticket}>"
                "<label>User <input name=user></label><button>Sign in</button></form>"
            )
        return RedirectResponse(provider.signed_in(ticket, user), status_code=302)

    @server.tool()
    def whoami() -> str:
        """The user this call is made for."""
        token = get_access_token()
        user = token.subject if token is not None else "nobody"
        provider.seen.append(user or "nobody")
        return f"you are {user}"

    @server.tool()
    def stats() -> str:
        """How many tokens were issued and refreshed, and whose tokens were seen."""
        counts = provider.counts
        seen = ",".join(provider.seen)
        return f"issued={counts['issued']} refreshed={counts['refreshed']} seen={seen}"

    return server


if __name__ == "__main__":
    port = int(sys.argv[1])
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 3600
    asyncio.run(build(port, seconds).run_streamable_http_async(port=port))
