"""The API tests of export and import run on each stack and each blob store."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def run_overrides(blob_settings: dict[str, Any]) -> dict[str, Any]:
    return {"blobs": blob_settings}
