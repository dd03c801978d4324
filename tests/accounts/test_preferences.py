"""A user's preferences (issue 44: the theme on the account page), over HTTP on both
databases: set with a session, shown by `/api/me` everywhere, refused when unknown."""

from __future__ import annotations

import httpx

from tests.helpers import assert_error, bearer, signup


async def test_the_theme_is_kept_for_the_user_and_bad_ones_refused(
    client: httpx.AsyncClient,
) -> None:
    session = (await signup(client, "ada@example.com"))["token"]
    me = await client.get("/api/me", headers=bearer(session))
    assert me.json()["user"]["theme"] == "system"
    r = await client.patch("/api/me", json={"theme": "dark"}, headers=bearer(session))
    assert (r.status_code, r.json()["theme"]) == (200, "dark"), r.text
    other = (await client.post("/api/auth/login", json={"email": "ada@example.com",
             "password": "correct horse battery"})).json()["token"]  # fmt: skip
    assert (await client.get("/api/me", headers=bearer(other))).json()["user"]["theme"] == "dark"
    for body in ({"theme": "purple"}, {"theme": "dark", "font": "big"}, {}):
        assert_error(await client.patch("/api/me", json=body, headers=bearer(session)), 422)
    key = await client.post("/api/keys", json={"name": "k"}, headers=bearer(session))
    r = await client.patch("/api/me", json={"theme": "light"}, headers=bearer(key.json()["key"]))
    assert_error(r, 403, "session_required")
    bob = (await signup(client, "bob@example.com"))["token"]
    assert (await client.get("/api/me", headers=bearer(bob))).json()["user"]["theme"] == "system"
