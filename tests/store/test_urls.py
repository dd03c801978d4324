"""Database URLs as operators write them (libpq's several hosts) made into the driver's, with
the target_session_attrs of their role; bad input refused with its reason."""

from __future__ import annotations

import pytest

from parley.config import load_settings
from parley.errors import ConfigurationError
from parley.store.urls import Role, normalize_database_url

PRIMARY = [
    # libpq's several hosts in the netloc: SQLAlchemy's repeated host=, each with its port
    (
        "postgresql://u:p%40ss@a:5432,b:5433/db?target_session_attrs=read-write",
        "postgresql+asyncpg://u:p%40ss@/db?host=a:5432&host=b:5433&target_session_attrs=read-write",
    ),
    # a host without a port gets 5432; the primary's attrs default to read-write
    ("postgres://u@a,b:6000/db", "postgresql+asyncpg://u@/db?host=a:5432&host=b:6000&target_session_attrs=read-write"),
    # libpq's host= and port= lists
    ("postgresql://u@/db?host=a,b&port=1,2", "postgresql+asyncpg://u@/db?host=a:1&host=b:2&target_session_attrs=read-write"),
    ("postgresql://u@/db?host=a,b&port=7", "postgresql+asyncpg://u@/db?host=a:7&host=b:7&target_session_attrs=read-write"),
    # one host stays in the netloc
    ("postgresql+asyncpg://postgres@127.0.0.1:5432/test", "postgresql+asyncpg://postgres@127.0.0.1:5432/test?target_session_attrs=read-write"),
    ("postgresql://u@/db?host=/run/postgresql", "postgresql+asyncpg://u@/db?host=/run/postgresql&target_session_attrs=read-write"),
    ("postgresql://u@[::1]:5,[::2]/db?sslmode=require", "postgresql+asyncpg://u@/db?host=[::1]:5&host=[::2]:5432&ssl=require&target_session_attrs=read-write"),
    ("postgresql://u@h/db?target_session_attrs=primary", "postgresql+asyncpg://u@h/db?target_session_attrs=primary"),
    ("sqlite:///data/parley.db", "sqlite+aiosqlite:///data/parley.db"),
]  # fmt: skip


@pytest.mark.parametrize(("given", "expected"), PRIMARY)
def test_primary_urls_are_normalised_once_and_for_all(given: str, expected: str) -> None:
    assert normalize_database_url(given) == expected
    assert normalize_database_url(expected) == expected  # idempotent


def test_a_replica_url_prefers_standbys() -> None:
    assert normalize_database_url("postgresql://u@a:1,b:2/db", Role.REPLICA) == (
        "postgresql+asyncpg://u@/db?host=a:1&host=b:2&target_session_attrs=prefer-standby"
    )
    given = "postgresql://u@a/db?target_session_attrs=standby"
    assert normalize_database_url(given, Role.REPLICA).endswith("target_session_attrs=standby")


@pytest.mark.parametrize(
    ("url", "role", "reason"),
    [
        ("mysql://x", Role.PRIMARY, "must start with sqlite:// or postgresql://"),
        ("postgresql://u@a/db?target_session_attrs=standby", Role.PRIMARY, "writes on a standby"),
        ("postgresql://u@a/db?target_session_attrs=prefer-standby", Role.PRIMARY, "standby"),
        ("postgresql://u@a/db?target_session_attrs=read-write", Role.REPLICA, "from the primary"),
        ("postgresql://u@a/db?target_session_attrs=anything", Role.PRIMARY, "is not one of"),
        ("postgresql://u@a:99999/db", Role.PRIMARY, "port '99999'"),
        ("postgresql://u@a:x,b/db", Role.PRIMARY, "port 'x'"),
        ("postgresql://u@a,,b/db", Role.PRIMARY, "an empty host"),
        ("postgresql://u@/db?host=a,b&port=1,2,3", Role.PRIMARY, "2 hosts but 3 ports"),
        ("postgresql://u@a/db?host=b", Role.PRIMARY, "not both"),
        ("postgresql://u@a/db?connect_timeout=3", Role.PRIMARY, "database_connect_timeout"),
        ("sqlite:///x.db", Role.REPLICA, "must name Postgres"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url: str, role: Role, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        normalize_database_url(url, role)


def test_settings_normalise_both_urls_and_refuse_a_replica_without_postgres() -> None:
    settings = load_settings(
        database_url="postgresql://u@a:1,b:2/db",
        database_replica_url="postgresql://u@a:1,b:2/db",
        read_your_writes_seconds=2,
    )
    assert "target_session_attrs=read-write" in settings.database.resolved_url
    assert settings.database.replica_url is not None
    assert settings.database.replica_url.endswith("target_session_attrs=prefer-standby")
    with pytest.raises(ConfigurationError, match="needs a Postgres database_url"):
        load_settings(database_replica_url="postgresql://u@a/db")
    with pytest.raises(ConfigurationError, match=r"database_replica_url: .*from the primary"):
        load_settings(
            database_url="postgresql://u@a/db",
            database_replica_url="postgresql://u@a/db?target_session_attrs=read-write",
        )
    with pytest.raises(ConfigurationError, match="database_connect_timeout_seconds"):
        load_settings(database_connect_timeout_seconds=0)
