"""Every command and settings example in the README, run as written against a scratch data
directory (issue 46). Each shell line of the README's ```bash blocks must be claimed by one
of the checks below: a line added to the README without a check fails the first test."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest

from tests.processes import free_port
from tests.waiting import eventually_sync

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PASSWORD = "correct horse battery staple"

pytestmark = pytest.mark.slow

# what CI itself runs (.ci/run → make test: lint, typecheck, the fuzzers, the suite this test
# is in): running them here would run CI inside CI
RUN_BY_CI = (
    re.compile(r"^make test$"),
    re.compile(r"^make screenshots$"),  # its test, tests/e2e/test_screenshots.py, is in the suite
    re.compile(r"^make lint typecheck$"),
    re.compile(r'^(PARLEY_TEST_BACKENDS=sqlite )?make pytest( ARGS=".*")?$'),
    re.compile(r"^scripts/schemathesis\.sh 60( postgresql://\S+)?$"),
)
SERVE = re.compile(r'^(?:(?P<env>PARLEY_\w+=\S+) )?make serve( ARGS="--port \d+")?$')
ADMIN = re.compile(r"^(echo '.*' \| )?\.venv/bin/parley (user|audit|runs) .*$")


def readme_commands() -> tuple[list[str], list[str]]:
    """(the quick start's lines, every other line) of the README's bash blocks; a line
    continued with a backslash is one line, comments are left out."""
    text = README.read_text()
    quick = re.search(r"<!-- quickstart -->\n(.*?)<!-- /quickstart -->", text, re.S)
    assert quick, "README lost its quick start"
    rest = text.replace(quick.group(0), "")
    return _lines(quick.group(1)), _lines(rest)


def _lines(text: str) -> list[str]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()  # a trailing comment
            if line and not line.startswith("#"):
                out.append(" ".join(line.split()))
    return out


def test_every_readme_command_has_a_check() -> None:
    quick, rest = readme_commands()
    assert quick, "the quick start has no commands"  # tests/integration/test_readme.py runs it
    unclaimed = [
        line for line in rest if not any(p.match(line) for p in (*RUN_BY_CI, SERVE, ADMIN))
    ]
    assert unclaimed == [], f"README commands no test runs: {unclaimed}"
    assert any(SERVE.match(line) for line in rest) and any(ADMIN.match(line) for line in rest)


@pytest.fixture
def scratch(tmp_path: Path) -> dict[str, str]:
    """The environment of a fresh machine's shell, its data in a scratch directory."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "PARLEY_TIERS")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("XDG_")}
    env["PARLEY_DATA_DIR"] = str(tmp_path / "data")
    env["PARLEY_ACCOUNTS__SIGNUP_CHALLENGE_AFTER"] = "100"  # (this test signs up 2)
    return env


def _serve(line: str, env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """`make serve` as the README writes it (with its documented ARGS for the port)."""
    found = SERVE.match(line)
    assert found
    extra = dict([found.group("env").split("=", 1)]) if found.group("env") else {}
    return subprocess.Popen(
        ["make", "serve", f"ARGS=--port {port}"],
        cwd=ROOT,
        env={**env, **extra},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # make's child too is stopped with its group
    )


@pytest.fixture
def served(scratch: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """Each README line that serves, run in turn; yields (its URL, the lines) for the last."""
    _, rest = readme_commands()
    lines = [line for line in rest if SERVE.match(line)]
    for line in lines:
        port = free_port()
        proc = _serve(line, scratch, port)
        base = f"http://127.0.0.1:{port}"
        try:
            ready = partial(_ready, base, proc)
            eventually_sync(ready, f"{line!r} to serve", timeout=180)
            if line is lines[-1]:
                yield base, lines
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


def _ready(base: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "it exited"
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _sign_up(base: str, email: str, password: str = PASSWORD) -> httpx.Client:
    r = httpx.post(f"{base}/api/auth/signup", json={"email": email, "password": password})
    assert r.status_code == 201, r.text
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {r.json()['token']}"})


def test_the_readme_serves_and_its_admin_commands_run_as_written(
    served: tuple[str, list[str]], scratch: dict[str, str]
) -> None:
    base, lines = served
    you = _sign_up(base, "you@example.com")
    _sign_up(base, "someone@example.com")
    env = SERVE.match(lines[-1]).groupdict()["env"]  # type: ignore[union-attr]
    if env == "PARLEY_TIERS__FREE__BURST_TOKENS=5000":  # the settings example took effect
        assert you.get("/api/me").json()["budget"]["limit_tokens"] == 5000

    _, rest = readme_commands()
    for line in [line for line in rest if ADMIN.match(line)]:
        r = subprocess.run(
            ["bash", "-c", f"set -euo pipefail\n{line}"],
            cwd=ROOT,
            env=scratch,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr}"
        assert r.stderr == "", f"{line} printed log records:\n{r.stderr}"

    role = lambda: you.get("/api/me").json()["user"]["role"] == "admin"  # noqa: E731
    eventually_sync(role, "the role to be seen (sessions are cached a few seconds)", timeout=15)
    relog = {"email": "someone@example.com", "password": "a new pass phrase"}
    assert httpx.post(f"{base}/api/auth/login", json=relog).status_code == 200
