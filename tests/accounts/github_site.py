"""A stand-in for GitHub's OAuth 2.0 and REST API (github.com is not reachable from the
tests), as its documentation describes them: `/login/oauth/authorize` (here it approves at
once, as the user the test names with `login=`), `/login/oauth/access_token` (the client's
secret from the form, the code once, the redirect address and the PKCE verifier checked;
errors as JSON with status 200, as GitHub answers), and `/api/v3/user`, `/user/emails`,
`/user/orgs` (GitHub Enterprise Server's API path) with the bearer token."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

CLIENT_ID, CLIENT_SECRET = "Iv1.parley", "gh-secret"


@dataclass
class GithubUser:
    id: int
    login: str
    emails: list[dict[str, Any]]
    orgs: list[str] = field(default_factory=list)


@dataclass
class GithubSite:
    users: dict[str, GithubUser] = field(default_factory=dict)
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/login/oauth/authorize", self.authorize),
                Route("/login/oauth/access_token", self.token, methods=["POST"]),
                Route("/api/v3/user", self.user),
                Route("/api/v3/user/emails", self.emails),
                Route("/api/v3/user/orgs", self.orgs),
            ]
        )

    async def authorize(self, request: Request) -> Response:
        q = request.query_params
        if q.get("client_id") != CLIENT_ID or q.get("code_challenge_method") != "S256":
            return JSONResponse({"error": "bad request"}, 400)
        code = secrets.token_hex(10)
        self.codes[code] = {
            "login": q["login"],
            "challenge": q["code_challenge"],
            "redirect_uri": q["redirect_uri"],
            "scope": q.get("scope", ""),
        }
        back = {"code": code, "state": q["state"]}
        return RedirectResponse(f"{q['redirect_uri']}?{urlencode(back)}", 302)

    async def token(self, request: Request) -> Response:
        form = await request.form()
        grant = self.codes.pop(str(form.get("code")), None)
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return JSONResponse({"error": "incorrect_client_credentials"})
        if grant is None or form.get("redirect_uri") != grant["redirect_uri"]:
            return JSONResponse({"error": "bad_verification_code"})
        verifier = str(form.get("code_verifier", "")).encode()
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
        if challenge.decode() != grant["challenge"]:
            return JSONResponse({"error": "bad_verification_code"})
        token = f"gho_{secrets.token_hex(16)}"
        self.tokens[token] = grant["login"]
        return JSONResponse(
            {"access_token": token, "token_type": "bearer", "scope": grant["scope"]}
        )

    def _who(self, request: Request) -> GithubUser | None:
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        login = self.tokens.get(token)
        return self.users.get(login) if login else None

    async def user(self, request: Request) -> Response:
        who = self._who(request)
        if who is None:
            return JSONResponse({"message": "Bad credentials"}, 401)
        return JSONResponse({"id": who.id, "login": who.login, "name": who.login.title()})

    async def emails(self, request: Request) -> Response:
        who = self._who(request)
        return JSONResponse(who.emails) if who else JSONResponse({}, 401)

    async def orgs(self, request: Request) -> Response:
        who = self._who(request)
        return JSONResponse([{"login": o} for o in who.orgs]) if who else JSONResponse({}, 401)
