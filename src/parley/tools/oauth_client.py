"""The OAuth 2.1 steps of connecting an MCP server as the MCP spec describes them, with the
``mcp`` SDK's own discovery rules and models: discovery (RFC 9728, then RFC 8414 with the
issuer checked), the RFC 8707 resource, dynamic client registration (RFC 7591), PKCE's
challenge, and the token endpoint (a code or a refresh token traded for tokens). The
flow that uses them, and where tokens are kept, is ``tools/mcp_oauth.py``."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

import httpx2
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_client_registration_request,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    handle_registration_response,
    validate_metadata_issuer,
)
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

from parley.errors import DependencyUnavailable
from parley.tools.settings import McpOAuthSettings, McpServerSettings

NO_SECRET = "none"  # noqa: S105 (a public client: the token endpoint auth method)
BASIC = "client_secret_basic"


class ConnectFailed(DependencyUnavailable):
    """The server or its authorization server did not take part as OAuth says."""

    code = "mcp_oauth_failed"


class TokenRefused(ConnectFailed):
    """The token endpoint said no; ``error`` is its OAuth error code (RFC 6749 §5.2)."""

    def __init__(self, answer: httpx2.Response) -> None:
        super().__init__(f"the token endpoint refused ({answer.status_code}): {answer.text[:200]}")
        try:
            said = answer.json()
        except ValueError:
            said = {}
        self.error = str(said.get("error", "")) if isinstance(said, dict) else ""


@dataclass(frozen=True, slots=True)
class Discovered:
    metadata: OAuthMetadata
    resource: str | None  # the RFC 8707 resource, when the server published its metadata
    scope: str | None


async def token_request(
    http: httpx2.AsyncClient,
    found: Discovered,
    client: OAuthClientInformationFull,
    form: dict[str, str],
) -> OAuthToken:
    form = {**form, "client_id": client.client_id}
    if found.resource is not None:
        form["resource"] = found.resource
    headers = {"Accept": "application/json"}
    secret = client.client_secret
    if secret and client.token_endpoint_auth_method == BASIC:
        basic = base64.b64encode(f"{client.client_id}:{secret}".encode()).decode()
        headers["Authorization"] = f"Basic {basic}"
    elif secret:
        form["client_secret"] = secret
    try:
        answer = await http.post(str(found.metadata.token_endpoint), data=form, headers=headers)
    except httpx2.HTTPError as e:
        raise ConnectFailed(f"the token endpoint could not be reached: {type(e).__name__}") from e
    if answer.status_code != 200:
        raise TokenRefused(answer)
    try:
        return OAuthToken.model_validate_json(answer.content)
    except ValueError as e:
        raise ConnectFailed("the token endpoint's answer is not a token") from e


async def discovery(http: httpx2.AsyncClient, url: str, oauth: McpOAuthSettings) -> Discovered:
    first = await http.get(url, headers={"Accept": "application/json, text/event-stream"})
    prm: ProtectedResourceMetadata | None = None
    hinted = extract_resource_metadata_from_www_auth(first) if first.status_code == 401 else None
    for where in build_protected_resource_metadata_discovery_urls(hinted, url):
        prm = await handle_protected_resource_response(
            await http.send(create_oauth_metadata_request(where))
        )
        if prm is not None:
            break
    issuer = str(prm.authorization_servers[0]) if prm and prm.authorization_servers else None
    metadata = None
    for where in build_oauth_authorization_server_metadata_discovery_urls(issuer, url):
        ok, metadata = await handle_auth_metadata_response(
            await http.send(create_oauth_metadata_request(where))
        )
        if not ok or metadata is not None:
            break
    if metadata is None:
        raise ConnectFailed(f"{url} names no authorization server that could be read")
    if issuer is not None:
        try:
            validate_metadata_issuer(metadata, issuer)
        except Exception as e:
            raise ConnectFailed(str(e)) from None
    return Discovered(metadata, _resource(url, prm), oauth.scope or _scopes(prm))


def _resource(url: str, prm: ProtectedResourceMetadata | None) -> str | None:
    if prm is None:
        return None
    resource = resource_url_from_server_url(url)
    if prm.resource and check_resource_allowed(resource, str(prm.resource)):
        return str(prm.resource)
    return resource


def _scopes(prm: ProtectedResourceMetadata | None) -> str | None:
    return " ".join(prm.scopes_supported) if prm and prm.scopes_supported else None


def configured(oauth: McpOAuthSettings, redirect_uri: str) -> OAuthClientInformationFull | None:
    if oauth.client_id is None:
        return None
    secret = None if oauth.client_secret is None else oauth.client_secret.get_secret_value()
    return OAuthClientInformationFull(
        client_id=oauth.client_id,
        client_secret=secret,
        redirect_uris=[redirect_uri],
        token_endpoint_auth_method="client_secret_post" if secret else NO_SECRET,
    )


async def register(
    http: httpx2.AsyncClient, server: McpServerSettings, found: Discovered, redirect_uri: str
) -> OAuthClientInformationFull:
    if found.metadata.registration_endpoint is None:
        raise ConnectFailed(
            f"{server.name}'s authorization server offers no dynamic client registration: "
            f"set tools.mcp_servers[{server.name}].oauth.client_id"
        )
    wanted = OAuthClientMetadata(
        redirect_uris=[redirect_uri],
        token_endpoint_auth_method=NO_SECRET,
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        client_name="parley",
        scope=found.scope,
    )
    request = create_client_registration_request(found.metadata, wanted, "")
    try:
        return await handle_registration_response(await http.send(request))
    except Exception as e:
        raise ConnectFailed(f"{server.name} refused parley's registration: {e}") from None


def challenge(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")
