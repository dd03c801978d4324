"""`bench/overload.py` at a tiny size: both modes run end to end and report what they saw."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from parley.tiers import TierSettings

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_overload_runs_both_modes_and_reports_them(tmp_path: Path) -> None:
    figures_file = tmp_path / "overload.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "overload.py"),
            *("--duration", "1.5", "--slots", "8", "--tokens", "8"),
            *("--unloaded", "2", "--warmup", "1", "--free-users", "6", "--pro-users", "3"),
            *("--json", str(figures_file)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for mode in ("baseline", "admission"):
        for tier in ("free", "pro"):
            assert f"| {mode} | {tier} |" in done.stdout
    assert "| goal | baseline | admission |" in done.stdout

    figures = json.loads(figures_file.read_text())
    for mode in figures["modes"].values():
        assert mode["unloaded_failures"] == 0
        assert mode["busy_engine"] is not None
        for tier in mode["tiers"].values():
            assert tier["offered"] > 0
            assert tier["unloaded_p50_ms"] is not None
            shares = tier["served"] * tier["offered"]
            counted = shares + sum(tier["refused"].values()) + sum(tier["failed"].values())
            assert round(counted) == tier["offered"]
    baseline = figures["modes"]["baseline"]["tiers"]
    assert baseline["free"]["served"] == baseline["pro"]["served"] == 1.0  # nothing shed
    if "max_load" in TierSettings.model_fields:  # parley sheds: twice its capacity, free refused
        assert figures["modes"]["admission"]["tiers"]["free"]["refused"]
