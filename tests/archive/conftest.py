"""Archive tests run on each stack (SQLite + in-process bus, Postgres + Redis) AND each blob
store (``blob_settings`` of tests/conftest.py: a directory, a real S3 server)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def run_overrides(blob_settings: dict[str, Any]) -> dict[str, Any]:
    return {"blobs": blob_settings}
