"""The composition root (``parley.services``): what each shape of process builds and imports."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from parley import services as services_module
from parley.config import load_settings
from parley.engines.interface import Engine
from tests.builders import migrate, sqlite_url

# Run in a fresh interpreter: the test process has long imported the HTTP layer.
WORKER_IMPORTS = textwrap.dedent(
    """
    import asyncio
    import sys
    from pathlib import Path

    import parley.cli
    import parley.runs.worker
    import parley.services
    from parley.config import load_settings

    tmp = Path(sys.argv[1])
    settings = load_settings(
        database_url=f"sqlite+aiosqlite:///{tmp / 'parley.db'}", data_dir=tmp, engine="fake"
    )
    services = parley.services.build_services(settings, worker=True)
    assert services.worker is not None and services.engine is not None
    asyncio.run(services.close(grace=0))
    for name in sorted(sys.modules):
        print(name)
    """
)


def test_a_worker_process_imports_neither_the_http_layer_nor_fastapi(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WORKER_IMPORTS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modules = done.stdout.split()
    assert "parley.services" in modules and "parley.runs.worker" in modules
    offending = [
        m
        for m in modules
        if m in {"parley.api", "fastapi"} or m.startswith(("parley.api.", "fastapi."))
        # the root settings compose the api package's own section (pydantic only)
        if m not in {"parley.api", "parley.api.settings"}
    ]
    assert not offending, f"a worker process imported the HTTP layer: {offending}"


async def test_the_api_shape_builds_everything_but_an_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_engine(*args: object, **kwargs: object) -> Engine:
        raise AssertionError("an api process built an engine")

    monkeypatch.setattr(services_module, "build_engine", no_engine)
    url = sqlite_url(tmp_path)
    await migrate(url)
    settings = load_settings(database_url=url, data_dir=tmp_path, engine="fake")
    svc = services_module.build_services(settings, worker=False)
    try:
        assert svc.engine is None and svc.worker is None
        assert svc.settings is settings
        parts = ("db", "bus", "budget", "finisher", "accounts", "submitter", "relay", "sweeper")
        for part in parts:
            assert getattr(svc, part) is not None, part
        assert svc.models, "the api process knows the models it may queue runs for"
        await svc.start()  # the sweeper, exports' and the audit log's upkeep: no worker
        assert list(svc.supervisor.watched) == ["sweeper", "exports", "audit"]
    finally:
        await svc.close(grace=0)


def test_a_downgrade_model_that_is_not_served_is_refused_at_start_up(tmp_path: Path) -> None:
    from parley.errors import ConfigurationError
    from parley.tiers import default_tiers

    free = {**default_tiers()["free"].model_dump(), "downgrade_model": "tiny"}
    settings = load_settings(data_dir=tmp_path, engine="fake", tiers={"free": free})
    with pytest.raises(ConfigurationError, match=r"downgrade_model 'tiny' is not one of"):
        services_module.build_services(settings)
    served = {**free, "downgrade_model": "parley-fake"}
    ok = load_settings(data_dir=tmp_path, engine="fake", tiers={"free": served})
    services_module.build_services(ok)  # the fake engine's model: fine
