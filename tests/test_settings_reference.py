"""docs/SETTINGS.md is what scripts/settings_reference.py makes of the settings models now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_settings_reference_page_matches_the_settings_models() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/settings_reference.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
