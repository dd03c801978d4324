"""SCIM resources to rows and back: a row keeps what the provider wrote (no id, meta,
password — hashed into the account — nor the memberships, which live in their table); a
resource read back gets its id, meta (version ``W/"n"``), a User's ``groups`` and a Group's
``members`` (references relative to the SCIM root: the server makes them URLs). A Group's
members are kept as written too (their ``display`` is the provider's to write), those
since deleted left out."""

from __future__ import annotations

from typing import Any

from scim2_models import Resource
from sqlalchemy.ext.asyncio import AsyncSession

from parley.store import scim
from parley.store.scim import ScimResource

USER = "User"
GROUP = "Group"
NOT_KEPT = {"id", "meta", "password", "groups"}
ENDPOINTS = {USER: "Users", GROUP: "Groups"}


def body_of(resource: Resource[Any]) -> dict[str, Any]:
    dumped = resource.model_dump(mode="json")
    body = {k: v for k, v in dumped.items() if k not in NOT_KEPT}
    if "members" in body:
        body["members"] = [{k: v for k, v in m.items() if k != "$ref"} for m in body["members"]]
    return body


def version_of(row: ScimResource) -> str:
    return f'W/"{row.version}"'


async def assembled(
    s: AsyncSession, model: type[Resource[Any]], rows: list[ScimResource]
) -> list[Resource[Any]]:
    """The rows as resources of ``model``, their memberships read in two queries."""
    pairs = await scim.links(s, [r.id for r in rows])
    related = await scim.by_ids(s, {i for pair in pairs for i in pair})
    return [model.model_validate(_document(row, pairs, related)) for row in rows]


def _document(
    row: ScimResource, pairs: list[tuple[str, str]], related: dict[str, ScimResource]
) -> dict[str, Any]:
    data = dict(row.body)
    data["id"] = row.id
    data["meta"] = {
        "resourceType": row.kind,
        "created": row.created_at.isoformat(),
        "lastModified": row.updated_at.isoformat(),
        "version": version_of(row),
    }
    if row.kind == USER:
        groups = [related[g] for g, m in pairs if m == row.id and g in related]
        data["groups"] = [_reference(g, "direct") for g in groups]
    else:
        members = {m: related[m] for g, m in pairs if g == row.id and m in related}
        written = [m for m in data.get("members") or [] if m.get("value") in members]
        data["members"] = [
            {**_reference(members[m["value"]], members[m["value"]].kind), **m} for m in written
        ]
    return data


def _reference(row: ScimResource, kind: str) -> dict[str, Any]:
    display = row.body.get("displayName") or row.body.get("userName")
    found = {"value": row.id, "$ref": f"{ENDPOINTS[row.kind]}/{row.id}", "type": kind}
    return {**found, "display": display} if display else found
