"""Malformed requests get clear error bodies: bad JSON, unknown routes and methods, invalid
fields, conflicts."""

from __future__ import annotations

import httpx

from tests.helpers import assert_error


async def test_malformed_requests_get_clear_errors(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    r = await client.post(
        "/api/chats", content=b"{not json", headers={**auth, "content-type": "application/json"}
    )
    assert_error(r, 400, "invalid_json")
    assert_error(await client.get("/api/nope", headers=auth), 404)
    r = await client.put("/api/chats", headers=auth)
    assert_error(r, 405)
    assert r.headers["allow"] == "GET, POST"
    r = await client.post("/api/auth/signup", json={"email": "not-an-email", "password": "x" * 10})
    assert assert_error(r, 422)["param"] == "email"
    r = await client.post("/api/auth/signup", json={"email": "b@example.com", "password": "short"})
    assert assert_error(r, 422)["param"] == "password"
    r = await client.post(
        "/api/auth/signup", json={"email": "ADA@example.com", "password": "long enough pw"}
    )
    assert_error(r, 409, "email_taken")
