"""The operator's CLI: migrate, user create / set-tier / list, settings refused at start."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from parley.api.app import create_app
from parley.config import load_settings
from parley.errors import Unauthenticated
from parley.services import build_services
from tests.builders import sqlite_url


def parley(
    *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    return subprocess.run(
        [sys.executable, "-m", "parley", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=60,
        check=False,
    )


def test_users_are_created_listed_and_moved_between_tiers(database_url: str) -> None:
    db = ["--database-url", database_url]
    assert parley("migrate", *db).returncode == 0
    r = parley(
        "user",
        "create",
        "Op@Example.com",
        "--tier",
        "pro",
        "--password-stdin",
        *db,
        stdin="operator password\n",
    )
    assert r.returncode == 0, r.stderr
    user_id, email, tier = r.stdout.strip().split("\t")
    assert (email, tier) == ("op@example.com", "pro")

    r = parley("user", "create", "op@example.com", "--password-stdin", *db, stdin="another pw1\n")
    assert r.returncode == 1 and "already exists" in r.stderr
    r = parley(
        "user",
        "create",
        "x@example.com",
        "--tier",
        "gold",
        "--password-stdin",
        *db,
        stdin="operator password\n",
    )
    assert r.returncode == 1 and "unknown tier 'gold'" in r.stderr
    r = parley("user", "create", "y@example.com", "--password-stdin", *db, stdin="short\n")
    assert r.returncode == 1 and "password" in r.stderr

    assert parley("user", "set-tier", "op@example.com", "plus", *db).returncode == 0
    r = parley("user", "set-tier", "nobody@example.com", "plus", *db)
    assert r.returncode == 1 and "no user" in r.stderr
    r = parley("user", "list", *db)
    lines = [line.split("\t") for line in r.stdout.strip().splitlines()]
    assert [(row[0], row[1], row[2]) for row in lines] == [(user_id, "op@example.com", "plus")]


async def test_a_created_user_can_log_in_with_the_tier_set(
    database_url: str, tmp_path: Path
) -> None:
    db = ["--database-url", database_url]
    r = parley(
        "user",
        "create",
        "op@example.com",
        "--tier",
        "plus",
        "--password-stdin",
        *db,
        stdin="operator password\n",
    )
    assert r.returncode == 0, r.stderr
    svc = build_services(load_settings(database_url=database_url, data_dir=tmp_path))
    app = create_app(svc)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r2 = await c.post(
            "/api/auth/login", json={"email": "op@example.com", "password": "operator password"}
        )
        assert r2.status_code == 200, r2.text
        me = await c.get("/api/me", headers={"Authorization": f"Bearer {r2.json()['token']}"})
        assert me.json()["tier"]["name"] == "plus"
        assert me.json()["tier"]["max_concurrent_runs"] == 3
    await svc.close()


def test_production_refuses_the_default_secret(tmp_path: Path) -> None:
    r = parley("migrate", "--data-dir", str(tmp_path), env={"PARLEY_ENVIRONMENT": "production"})
    assert r.returncode == 2
    assert "secret_key is left at its default" in r.stderr
    ok = parley(
        "migrate",
        "--data-dir",
        str(tmp_path),
        env={"PARLEY_ENVIRONMENT": "production", "PARLEY_SECRET_KEY": "s" * 40},
    )
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "parley.db").exists()


def test_settings_come_from_a_toml_file_and_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "parley.toml"
    config.write_text(
        f"""
data_dir = "{tmp_path / "from-file"}"
default_tier = "team"

[tiers.team]
priority = 5
tokens_per_minute = 100
burst_tokens = 1000
max_concurrent_runs = 2
max_output_tokens = 64
"""
    )
    r = parley(
        "user",
        "create",
        "t@example.com",
        "--config",
        str(config),
        "--password-stdin",
        stdin="team password\n",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("\tteam")
    assert (tmp_path / "from-file" / "parley.db").exists()
    # the environment wins over the file
    r = parley(
        "user", "list", "--config", str(config), env={"PARLEY_DATA_DIR": str(tmp_path / "from-env")}
    )
    assert r.returncode == 0 and r.stdout == ""


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('default_tier = "gold"', "default_tier 'gold' is not one of the tiers"),
        ("port = 99999", "port"),
        ("unknown_setting = 1", "unknown_setting"),
        ("this is not toml", "not valid TOML"),
        ('database_url = "mysql://x"', "database_url must start with"),
    ],
)
def test_bad_settings_stop_the_start_with_a_reason(
    tmp_path: Path, content: str, message: str
) -> None:
    config = tmp_path / "parley.toml"
    config.write_text(content + "\n")
    r = parley("serve", "--config", str(config))
    assert r.returncode == 2
    assert message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    r = parley("serve", "--config", str(tmp_path / "nope.toml"))
    assert r.returncode == 2
    assert "config file not found" in r.stderr


@pytest.mark.parametrize("command", ["api", "worker"])
def test_split_processes_need_a_shared_bus(tmp_path: Path, command: str) -> None:
    r = parley(command, "--data-dir", str(tmp_path))
    assert r.returncode == 1
    assert "--redis-url" in r.stderr


def test_an_unreachable_redis_is_named(tmp_path: Path) -> None:
    r = parley("worker", "--data-dir", str(tmp_path), "--redis-url", "redis://127.0.0.1:1/0")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "redis" in r.stderr.lower()


def test_an_unreachable_database_is_named_without_its_password(tmp_path: Path) -> None:
    url = "postgresql://parley:sekrit@127.0.0.1:1/parley"
    r = parley("migrate", "--database-url", url)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "cannot use the database" in r.stderr and "127.0.0.1:1" in r.stderr
    assert "sekrit" not in r.stderr


def test_the_command_line_loads_no_database_or_model_library_until_a_command_needs_it() -> None:
    # `parley engine serve` starts sooner without SQLAlchemy, Redis and Alembic (~0.7 s)
    probe = (
        "import sys; from parley.cli import _parser; _parser().parse_args(['engine', 'serve']); "
        "print(sorted(m for m in ('sqlalchemy', 'redis', 'alembic', 'torch', 'httpx') "
        "if m in sys.modules))"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert r.stdout.strip() == "[]", r.stdout


def test_roles_and_state_are_set_from_the_cli_and_audit_verify_finds_tampering(
    tmp_path: Path,
) -> None:
    """On SQLite only (the chain's checks run on both databases in-process:
    tests/accounts/test_audit.py)."""
    database_url = sqlite_url(tmp_path)
    db = ["--database-url", database_url]
    r = parley("user", "create", "op@example.com", "--password-stdin", *db, stdin="operator pw 1\n")
    assert r.returncode == 0, r.stderr
    r = parley("user", "set-role", "op@example.com", "admin", *db)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\t")[3:] == ["admin", "active\n"]
    r = parley("user", "disable", "op@example.com", *db)
    assert r.returncode == 1 and "last admin" in r.stderr  # nobody could administer then
    assert parley("user", "set-role", "op@example.com", "auditor", *db).returncode == 1
    r = parley("audit", "verify", *db)
    assert r.returncode == 0 and "holds: 2 records" in r.stdout, (r.stdout, r.stderr)
    exported = parley("audit", "export", *db).stdout.splitlines()
    assert ['"action": "user.created"' in exported[0], '"user.role_changed"' in exported[1]] == [
        True,
        True,
    ]

    import asyncio

    from sqlalchemy import text

    from parley.store.database import Database

    async def tamper() -> None:
        store = Database(database_url)
        async with store.transaction() as s:
            await s.execute(text("UPDATE audit_records SET actor = 'someone else'"))
        await store.dispose()

    asyncio.run(tamper())
    r = parley("audit", "verify", *db)
    assert r.returncode == 1 and "record 1: its contents were changed" in r.stderr, r.stderr
    assert "record 2: its contents were changed" in r.stderr


def test_the_operator_sets_a_password_from_standard_input_and_every_session_ends(
    tmp_path: Path,
) -> None:
    """`parley user set-password` as a process (issue 45): the password from standard input
    (no argument takes one), the password rules applied, the user's sessions ended, the
    change on the audit log; an account without a password is told so."""
    database_url = sqlite_url(tmp_path)
    db = ["--database-url", database_url]
    created = parley("user", "create", "ada@example.com", "--password-stdin", *db,
                     stdin="first pass phrase\n")  # fmt: skip
    assert created.returncode == 0, created.stderr

    async def session() -> str:
        settings = load_settings(database_url=database_url, data_dir=tmp_path, engine="fake")
        svc = build_services(settings)
        try:
            return (await svc.accounts.login("ada@example.com", "first pass phrase", None)).token
        finally:
            await svc.close()

    async def signed_in(token: str) -> bool:
        settings = load_settings(database_url=database_url, data_dir=tmp_path, engine="fake")
        svc = build_services(settings)
        try:
            await svc.accounts.authenticate(token)
            return True
        except Unauthenticated:
            return False
        finally:
            await svc.close()

    token = asyncio.run(session())
    assert parley("user", "set-password", "ada@example.com", "new pass", *db).returncode == 2
    weak = parley("user", "set-password", "ada@example.com", *db, stdin="password\n")
    assert weak.returncode == 1 and "password" in weak.stderr
    assert asyncio.run(signed_in(token))
    r = parley("user", "set-password", "ada@example.com", *db, stdin="second pass phrase\n")
    assert r.returncode == 0, r.stderr
    assert "every session ended" in r.stdout
    assert not asyncio.run(signed_in(token))
    exported = parley("audit", "export", *db).stdout
    assert '"account.password_reset"' in exported and '"actor": "cli"' in exported
    r = parley("user", "set-password", "nobody@example.com", *db, stdin="second pass phrase\n")
    assert r.returncode == 1 and "no user" in r.stderr


def test_help_names_every_command_in_plain_words() -> None:
    """`parley --help` (issue 46, item 8): no reStructuredText backticks, every command named."""
    r = parley("--help")
    assert r.returncode == 0, r.stderr
    assert "``" not in r.stdout
    for command in ("serve", "api", "worker", "engine", "migrate", "user", "runs", "audit",
                    "archive", "stats", "capacity"):  # fmt: skip
        assert f"\n    {command} " in r.stdout, command


def test_an_operators_command_prints_its_answer_not_the_migrations(tmp_path: Path) -> None:
    """Issue 46, item 8: the migrations a command runs on the way are not logged (INFO is the
    servers' default level; `--log-level INFO` still shows them)."""
    db = ["--database-url", sqlite_url(tmp_path)]
    quiet = parley("user", "list", *db)
    assert quiet.returncode == 0 and "alembic" not in quiet.stderr, quiet.stderr
    loud = parley(
        "--log-level", "INFO", "user", "list", "--database-url", sqlite_url(tmp_path / "b")
    )
    assert "alembic" in loud.stderr


def test_serve_on_a_busy_port_says_so_before_loading_anything(tmp_path: Path) -> None:
    """Issue 46, item 8: the port is tried first, not after the engine and the database."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        r = parley("serve", "--engine", "fake", "--port", str(port), "--data-dir", str(tmp_path))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr
    assert not (tmp_path / "parley.db").exists()  # nothing was set up before the refusal
