"""Archive tests run on each stack (SQLite + in-process bus, Postgres + Redis) AND each blob
store: a local directory and a real S3 server (SeaweedFS, started once per xdist worker)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.seaweed import S3Server, seaweed

BLOB_KINDS = ("local", "s3")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with seaweed(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


@pytest.fixture(params=BLOB_KINDS)
def blob_settings(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The blobs settings of one store; an S3 test's keys under a prefix of its own."""
    if request.param == "local":
        return {"kind": "local", "dir": str(tmp_path / "blobs")}
    server: S3Server = request.getfixturevalue("s3_server")
    return server.blob_settings(prefix=f"t/{tmp_path.name}")


@pytest.fixture
def run_overrides(blob_settings: dict[str, Any]) -> dict[str, Any]:
    return {"blobs": blob_settings}
