"""SCIM 2.0 conformance (issue 44): scim2-tester, the python-scim project's checker of
RFC 7643/7644, run over HTTP against `/scim/v2` on both databases — discovery, create,
read, replace, PATCH add/replace/remove of every attribute the schemas publish, filters,
delete — and every check it makes passes (none is an error; skipped ones are those the
server announces it does not do: bulk)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from scim2_client.engines.httpx2 import SyncSCIMClient
from scim2_tester import Status, check_server

from parley.api.app import create_app
from parley.services import Services
from tests.builders import served

TOKEN = "t" * 40


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"scim": {"token": TOKEN}}


@pytest.fixture
async def scim_url(services: Services) -> AsyncIterator[str]:
    async with served(create_app(services, close_services=False)) as base:
        yield f"{base}/scim/v2"


def check(url: str) -> list[Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx2.Client(base_url=url, headers=headers, timeout=30) as http:
        return check_server(SyncSCIMClient(http))


async def test_scim2_tester_finds_no_error(scim_url: str) -> None:
    results = await asyncio.to_thread(check, scim_url)
    failed = [r for r in results if r.status not in (Status.SUCCESS, Status.SKIPPED)]
    assert not failed, "\n".join(f"{r.title}: {r.reason}" for r in failed)
    passed = [r for r in results if r.status == Status.SUCCESS]
    print(f"scim2-tester: {len(passed)} passed, {len(results) - len(passed)} skipped")
    assert len(passed) > 50, [(r.title, r.status, r.reason) for r in results]
    skipped = {r.title for r in results if r.status == Status.SKIPPED}
    assert not {t for t in skipped if "bulk" not in t.lower()}, skipped
