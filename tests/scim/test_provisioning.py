"""What SCIM pushes do to accounts (issue 44), over HTTP on both databases: a provisioned
user signs in; deprovisioning (``active: false`` as Entra ID sends it, or DELETE) refuses
its session and key on their very next request; groups feed the tier and role rules
(and taking a member out takes the role away); an existing account's email is not taken
over unless the operator allows it; the bearer token guards all but the configuration."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.services import Services
from tests.accounts.test_audit import admin_headers, records
from tests.helpers import PASSWORD, bearer, signup

TOKEN = "s" * 40
SCIM = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/scim+json"}
USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
RULES = [
    {"claim": "groups", "value": "Parley Admins", "role": "admin"},
    {"claim": "groups", "value": "Pro people", "tier": "pro"},
]


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    extra = getattr(request, "param", {})
    return {"scim": {"token": TOKEN, "rules": RULES, **extra}}


async def provision(client: httpx.AsyncClient, email: str, **more: Any) -> dict[str, Any]:
    body = {
        "schemas": [USER],
        "userName": email.upper(),
        "externalId": f"ext-{email}",
        "emails": [{"value": email, "type": "work", "primary": True}],
        "active": True,
        **more,
    }
    r = await client.post("/scim/v2/Users", json=body, headers=SCIM)
    assert r.status_code == 201, r.text
    found: dict[str, Any] = r.json()
    return found


async def patch(client: httpx.AsyncClient, path: str, *ops: dict[str, Any]) -> httpx.Response:
    body = {"schemas": [PATCH], "Operations": list(ops)}
    return await client.patch(f"/scim/v2/{path}", json=body, headers=SCIM)


async def sign_in(client: httpx.AsyncClient, email: str) -> httpx.Response:
    r = await client.post("/api/auth/login", json={"email": email, "password": PASSWORD})
    client.cookies.clear()
    return r


async def session_and_key(client: httpx.AsyncClient, email: str) -> tuple[str, str]:
    r = await sign_in(client, email)
    assert r.status_code == 200, r.text
    session = r.json()["token"]
    r = await client.post("/api/keys", json={"name": "laptop"}, headers=bearer(session))
    assert r.status_code == 201, r.text
    return session, r.json()["key"]


async def me(client: httpx.AsyncClient, credential: str) -> httpx.Response:
    return await client.get("/api/me", headers=bearer(credential))


@pytest.mark.parametrize("settings_overrides", [{"rules": []}], indirect=True)  # rules: none
async def test_deprovisioning_refuses_the_session_and_key_on_their_next_request(
    client: httpx.AsyncClient, services: Services
) -> None:
    user = await provision(client, "ada@example.com", password=PASSWORD)
    assert "password" not in user
    session, key = await session_and_key(client, "ada@example.com")
    assert (await me(client, session)).status_code == 200
    assert (await me(client, key)).status_code == 200
    # what Entra ID sends: a capitalised op and the boolean as a string
    r = await patch(
        client, f"Users/{user['id']}", {"op": "Replace", "path": "active", "value": "False"}
    )
    assert r.status_code == 204, r.text
    got = await client.get(f"/scim/v2/Users/{user['id']}", headers=SCIM)
    assert got.json()["active"] is False
    assert (await me(client, session)).status_code == 401
    assert (await me(client, key)).status_code == 401
    assert (await sign_in(client, "ada@example.com")).status_code == 401

    r = await patch(client, f"Users/{user['id']}", {"op": "replace", "value": {"active": True}})
    assert r.status_code == 204, r.text
    assert (await sign_in(client, "ada@example.com")).status_code == 200
    assert (await me(client, key)).status_code == 401, "a deprovisioned key stays revoked"
    admin = await admin_headers(client, services)
    done = {(r["action"], r["detail"].get("rule")) for r in await records(client, admin)}
    assert ("user.disabled", "scim:active=false") in done
    assert ("user.enabled", "scim:active=true") in done
    assert ("user.keys_revoked", None) in done


@pytest.mark.parametrize("settings_overrides", [{}, {"on_delete": "delete"}], indirect=True)
async def test_a_deleted_user_is_refused_at_once_and_erased_when_so_configured(
    client: httpx.AsyncClient, services: Services, settings_overrides: dict[str, Any]
) -> None:
    user = await provision(client, "bob@example.com", password=PASSWORD)
    session, key = await session_and_key(client, "bob@example.com")
    r = await client.delete(f"/scim/v2/Users/{user['id']}", headers=SCIM)
    assert r.status_code == 204, r.text
    assert (await me(client, session)).status_code == 401
    assert (await me(client, key)).status_code == 401
    assert (await client.get(f"/scim/v2/Users/{user['id']}", headers=SCIM)).status_code == 404
    admin = await admin_headers(client, services)
    found = await client.get("/api/admin/users", params={"q": "bob@"}, headers=admin)
    erased = settings_overrides["scim"].get("on_delete") == "delete"
    assert [u["disabled"] for u in found.json()["data"]] == ([] if erased else [True])


async def test_groups_feed_the_role_and_tier_rules_both_ways(
    client: httpx.AsyncClient, services: Services
) -> None:
    admin = await admin_headers(client, services)  # so cy is not the last admin
    user = await provision(client, "cy@example.com", password=PASSWORD)
    session, _ = await session_and_key(client, "cy@example.com")
    assert (await client.get("/api/admin/users", headers=bearer(session))).status_code == 403
    group = {"schemas": [GROUP], "displayName": "Parley Admins", "members": [{"value": user["id"]}]}
    r = await client.post("/scim/v2/Groups", json=group, headers=SCIM)
    assert r.status_code == 201, r.text
    admins = r.json()
    assert [m["value"] for m in admins["members"]] == [user["id"]]
    assert (await client.get("/api/admin/users", headers=bearer(session))).status_code == 200
    pro = {"schemas": [GROUP], "displayName": "Pro people", "members": [{"value": user["id"]}]}
    assert (await client.post("/scim/v2/Groups", json=pro, headers=SCIM)).status_code == 201
    shown = (await me(client, session)).json()["user"]
    assert (shown["role"], shown["tier"]) == ("admin", "pro")
    got = await client.get(f"/scim/v2/Users/{user['id']}", headers=SCIM)
    assert sorted(g["display"] for g in got.json()["groups"]) == ["Parley Admins", "Pro people"]

    removed = {"op": "remove", "path": f'members[value eq "{user["id"]}"]'}
    assert (await patch(client, f"Groups/{admins['id']}", removed)).status_code == 204
    shown = (await me(client, session)).json()["user"]
    assert (shown["role"], shown["tier"]) == ("user", "pro")
    assert (await client.get("/api/admin/users", headers=bearer(session))).status_code == 403
    rules = [
        r["detail"].get("rule") for r in await records(client, admin, action="user.role_changed")
    ]
    assert "scim:no tier rule matched; groups=Parley Admins" in rules
    assert "scim:groups=Pro people; no role rule matched" in rules


@pytest.mark.parametrize("settings_overrides", [{}, {"link_existing_email": True}], indirect=True)
async def test_an_existing_account_is_taken_over_only_where_allowed(
    client: httpx.AsyncClient, settings_overrides: dict[str, Any]
) -> None:
    await signup(client, "dee@example.com")
    body = {"schemas": [USER], "userName": "dee", "emails": [{"value": "Dee@example.com"}]}
    r = await client.post("/scim/v2/Users", json=body, headers=SCIM)
    if not settings_overrides["scim"].get("link_existing_email"):
        assert r.status_code == 409, r.text
        assert r.json()["scimType"] == "uniqueness"
        return
    assert r.status_code == 201, r.text
    session, _ = await session_and_key(client, "dee@example.com")  # the same account
    deprovision = {"op": "replace", "path": "active", "value": False}
    assert (await patch(client, f"Users/{r.json()['id']}", deprovision)).status_code == 204
    assert (await me(client, session)).status_code == 401


async def test_the_email_follows_the_provider_and_stays_unique(client: httpx.AsyncClient) -> None:
    user = await provision(client, "eve@example.com", password=PASSWORD)
    await provision(client, "fay@example.com")
    moved = {
        "op": "replace",
        "path": "emails",
        "value": [{"value": "eve@corp.example", "primary": True}],
    }
    assert (await patch(client, f"Users/{user['id']}", moved)).status_code == 204
    assert (await sign_in(client, "eve@corp.example")).status_code == 200
    taken = {"op": "replace", "path": "emails", "value": [{"value": "fay@example.com"}]}
    r = await patch(client, f"Users/{user['id']}", taken)
    assert r.status_code == 409, r.text
    assert (await sign_in(client, "eve@corp.example")).status_code == 200, "nothing changed"


async def test_the_bearer_token_guards_everything_but_the_configuration(
    client: httpx.AsyncClient,
) -> None:
    for headers in ({}, {"Authorization": "Bearer " + "x" * 40}, {"Authorization": TOKEN}):
        r = await client.get("/scim/v2/Users", headers=headers)
        assert r.status_code == 401, r.text
        assert r.json()["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:Error"]
    r = await client.get("/scim/v2/ServiceProviderConfig")
    assert r.status_code == 200, r.text
    assert r.json()["bulk"]["supported"] is False
    r = await client.get("/scim/v2/Users", params={"filter": 'userName eq "nobody"'}, headers=SCIM)
    assert (r.status_code, r.json()["totalResults"]) == (200, 0)


@pytest.mark.parametrize("settings_overrides", [{"token": None}], indirect=True)
async def test_without_a_token_there_is_no_scim(client: httpx.AsyncClient) -> None:
    assert (await client.get("/scim/v2/ServiceProviderConfig")).status_code == 404
