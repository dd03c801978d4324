"""Workers archive by themselves when ``archive.periodic`` is on."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from parley.services import Services
from tests.archive.test_archive import _chat, _chat_with_answers, _history
from tests.helpers import user_headers
from tests.waiting import eventually


@pytest.fixture
def run_overrides(blob_settings: dict[str, Any]) -> dict[str, Any]:
    # idle for a second is old enough; a pass every 0.2 s
    archive = {"periodic": True, "interval_seconds": 0.2, "after_days": 1 / 86400}
    return {"blobs": blob_settings, "archive": archive}


async def test_the_worker_archives_idle_chats_by_itself(
    run_client: httpx.AsyncClient, run_services: Services
) -> None:
    auth = await user_headers(run_client, "ada@example.com")
    chat_id = await _chat_with_answers(run_client, auth, turns=1)
    before = await _history(run_client, auth, chat_id, limit=100)

    async def archived() -> bool | None:
        return (await _chat(run_services, chat_id)).archived_at is not None or None

    await eventually(archived, "the worker to archive the chat", timeout=20)
    assert await _history(run_client, auth, chat_id, limit=100) == before
