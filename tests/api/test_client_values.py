"""No client value reaches a 500 (issue 39): every JSON number a route reads, every numeric
query parameter and every signed token, sent in the shapes that broke parley once or could
(Unicode digits that ``str.isdigit`` takes and ``int`` refuses, integers past Python's
4,300-digit limit or past 64 bits, NaN and the infinities Python's JSON reader accepts,
negative zero). The routes and their fields come from the OpenAPI document, so a new route
is covered the day it lands. On both backends."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from parley.services import Services

# raw JSON texts put where a number goes
HOSTILE_NUMBERS = (
    "1" + "0" * 5000,
    "-" + "9" * 4400,
    "18446744073709551616",
    "-9223372036854775809",
    "1e999999",
    "-1e999999",
    "NaN",
    "Infinity",
    "-Infinity",
    "-0",
    "-0.0",
    "4.9e-324",
)
# texts put where a number or a signed token goes in a query, a path or a header
HOSTILE_TEXTS = (
    "\u00b2",
    "\u00b2.x",
    "\u0661\u0662\u0663",
    "\u0663.abc",
    "1" * 5000,
    "NaN",
    "-0",
    "1e999",
    "0x10",
    "+1",
    " 1",
    "9" * 30 + "." + "a" * 64,
    "\u00b2-\u00b3",
)
PLACEHOLDER = "__parley_number__"


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = document["components"]["schemas"][name]
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            resolved = _resolve(document, option)
            if resolved.get("type") != "null":
                return resolved
    return schema


def _sample(document: dict[str, Any], schema: dict[str, Any], depth: int = 0) -> Any:
    schema = _resolve(document, schema)
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object" and depth < 3:
        props = schema.get("properties", {})
        return {k: _sample(document, props[k], depth + 1) for k in schema.get("required", [])}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    return "x"


def _numeric(document: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The body's top-level properties that are numbers."""
    schema = _resolve(document, schema)
    props = schema.get("properties", {})
    return [
        k for k, v in props.items() if _resolve(document, v).get("type") in ("integer", "number")
    ]


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


def _url(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", path)


def _answered(r: httpx.Response, what: str) -> None:
    assert r.status_code < 500, f"{what}: {r.status_code} {r.text[:300]}"
    if r.status_code >= 400 and r.headers.get("content-type", "").startswith("application/json"):
        assert "error" in r.json() or "detail" not in r.json(), f"{what}: {r.text[:300]}"


async def test_no_json_number_in_any_body_is_a_500(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    document = (await client.get("/openapi.json")).json()
    tried = 0
    for method, path, op in _operations(document):
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        if body is None:
            continue
        base = _sample(document, body["schema"])
        for field in _numeric(document, body["schema"]):
            for number in HOSTILE_NUMBERS:
                text = json.dumps({**base, field: PLACEHOLDER}).replace(f'"{PLACEHOLDER}"', number)
                headers = {**auth, "Content-Type": "application/json"}
                r = await client.request(method, _url(path), content=text, headers=headers)
                _answered(r, f"{method} {path} {field}={number[:20]}")
                tried += 1
    assert tried > 50  # max_tokens, temperature, top_p, seed, n … of several routes


async def test_no_numeric_query_parameter_is_a_500(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    document = (await client.get("/openapi.json")).json()
    tried = 0
    for method, path, op in _operations(document):
        for param in op.get("parameters", []):
            kind = _resolve(document, param.get("schema", {})).get("type")
            if param["in"] != "query" or kind not in ("integer", "number"):
                continue
            for text in HOSTILE_TEXTS:
                r = await client.request(
                    method, _url(path), params={param["name"]: text}, headers=auth
                )
                _answered(r, f"{method} {path}?{param['name']}={text[:20]}")
                tried += 1
    assert tried > 10  # limit, … of the listing routes


async def test_no_signed_token_is_a_500(
    client: httpx.AsyncClient, auth: dict[str, str], services: Services
) -> None:
    """Export links, share links, page cursors, stream ids and credentials."""
    export = await client.post("/api/exports", headers=auth)
    assert export.status_code == 202, export.text
    export_id = export.json()["id"]
    for text in HOSTILE_TEXTS:
        tries: list[tuple[str, str, dict[str, str], dict[str, Any]]] = [
            ("GET", f"/api/exports/{export_id}/download", {"token": text}, {}),
            ("GET", "/api/exports/x1/download", {"token": text}, {}),
            ("GET", "/api/chats", {"cursor": text}, auth),
            ("GET", "/api/search", {"q": "x", "cursor": text}, auth),
            ("GET", "/api/runs/x1/events", {"last_event_id": text}, auth),
            ("GET", "/api/runs/x1/events", {}, {**auth, "Last-Event-ID": text.encode()}),
            ("GET", f"/api/shared/{text}", {}, {}),
            ("GET", "/api/me", {}, {"Authorization": f"Bearer {text}".encode()}),
            ("GET", "/api/me", {}, {"Cookie": f"parley_session={text}".encode()}),
        ]
        for method, path, params, headers in tries:
            r = await client.request(method, path, params=params, headers=headers)
            _answered(r, f"{method} {path} {params} {list(headers)} with {text[:20]!r}")


@pytest.mark.parametrize("expiry", ["\u00b2", "\u0661\u0662", "9" * 13])
async def test_an_export_link_with_a_broken_expiry_is_a_404(
    client: httpx.AsyncClient, auth: dict[str, str], expiry: str
) -> None:
    export = await client.post("/api/exports", headers=auth)
    r = await client.get(
        f"/api/exports/{export.json()['id']}/download", params={"token": f"{expiry}.abc"}
    )
    assert r.status_code == 404, r.text
