"""Database URLs as operators write them, made into the ones the drivers take.

An operator names a Postgres the libpq way, one host or several
(``postgresql://u@a:5432,b:5433/db?target_session_attrs=read-write``, or libpq's
``?host=a,b&port=5432,5433``); SQLAlchemy's asyncpg dialect takes several hosts as
repeated ``host=a:5432`` query parameters. ``normalize_database_url`` maps one to the other
(idempotently) and settles which server a pool may use, by its role:

* the **primary** URL (``database_url``) connects only to a server that takes writes:
  ``target_session_attrs`` defaults to ``read-write``, and a URL that would let it land on a
  standby (``standby``, ``read-only``, ``prefer-standby``) is refused. Listing every node of
  a failover group there lets a process find the promoted one without a restart.
* a **replica** URL (``database_replica_url``) prefers standbys: ``prefer-standby`` by
  default (a standby if one answers, else whichever node does); ``read-write`` and
  ``primary`` are refused (that is the primary URL's job).

Bad input is a ``ValueError`` with the reason, raised while the settings are validated.
"""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

DEFAULT_PORT = 5432
SESSION_ATTRS = ("any", "primary", "standby", "prefer-standby", "read-write", "read-only")
_PRIMARY_REFUSED = ("standby", "read-only", "prefer-standby")
_REPLICA_REFUSED = ("read-write", "primary")
_SCHEMES = {
    "postgresql": "postgres",
    "postgres": "postgres",
    "postgresql+asyncpg": "postgres",
    "sqlite": "sqlite",
    "sqlite+aiosqlite": "sqlite",
}


class Role(StrEnum):
    PRIMARY = "primary"
    REPLICA = "replica"


def normalize_database_url(url: str, role: Role = Role.PRIMARY) -> str:
    """``sqlite://`` and ``postgresql://`` URLs (one host or several) as the async drivers
    take them; a Postgres URL gets the ``target_session_attrs`` of its ``role``."""
    scheme, sep, rest = url.partition("://")
    kind = _SCHEMES.get(scheme.lower()) if sep else None
    if kind is None:
        raise ValueError("database_url must start with sqlite:// or postgresql://")
    if kind == "sqlite":
        if role is Role.REPLICA:
            raise ValueError("a replica URL must name Postgres (postgresql://…)")
        return f"sqlite+aiosqlite://{rest}"
    return _postgres(rest, role)


def _postgres(rest: str, role: Role) -> str:
    parts = urlsplit(f"//{rest}")
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    query = parse_qsl(parts.query, keep_blank_values=True)
    hosts = _hosts(hostlist, query)
    params = [(k, v) for k, v in query if k not in ("host", "port")]
    params = _session_attrs(params, role)
    params = [("ssl", v) if k == "sslmode" else (k, v) for k, v in params]
    if any(k == "connect_timeout" for k, _ in params):
        raise ValueError(
            "connect_timeout is not read from the URL: set database_connect_timeout_seconds"
        )
    if len(hosts) == 1 and hosts[0][0].startswith("/"):  # a Unix socket's directory
        netloc = f"{userinfo}{at}"
        port = [("port", str(hosts[0][1]))] if hosts[0][1] else []
        params = [("host", hosts[0][0]), *port, *params]
    elif len(hosts) == 1:
        netloc = f"{userinfo}{at}{_hostport(*hosts[0])}"
    else:
        netloc = f"{userinfo}{at}"
        params = [("host", _hostport(h, p or DEFAULT_PORT)) for h, p in hosts] + params
    query_text = urlencode(params, safe=":[],/")
    return f"postgresql+asyncpg://{netloc}{parts.path}" + (f"?{query_text}" if query_text else "")


def _hosts(hostlist: str, query: list[tuple[str, str]]) -> list[tuple[str, int | None]]:
    """Every (host, port) the URL names: in its netloc (``a:1,b:2``) or its query (libpq's
    ``host=a,b&port=1,2``, or SQLAlchemy's repeated ``host=a:1``), not both."""
    in_query = [v for k, v in query if k == "host"]
    ports = [v for k, v in query if k == "port"]
    if hostlist and (in_query or ports):
        raise ValueError("name the hosts either before the path or in ?host=, not both")
    if not in_query:
        if ports:
            raise ValueError("?port= without ?host=")
        return [_split_host(h) for h in hostlist.split(",")] if hostlist else [("", None)]
    names = [h for value in in_query for h in value.split(",")]
    if len(ports) > 1:  # SQLAlchemy's form never has ports apart
        raise ValueError("give one ?port= (a comma-separated list), or ports with each host")
    if not ports:
        return [_split_host(h) for h in names]
    port_list = ports[0].split(",")
    if len(port_list) == 1:
        port_list *= len(names)
    if len(port_list) != len(names):
        raise ValueError(f"{len(names)} hosts but {len(port_list)} ports")
    return [(_split_host(h)[0], _port(p)) for h, p in zip(names, port_list, strict=True)]


def _split_host(text: str) -> tuple[str, int | None]:
    text = text.strip()
    if not text:
        raise ValueError("an empty host in the database URL")
    if text.startswith("["):  # [ipv6]:port
        host, _, tail = text[1:].partition("]")
        return f"[{host}]", _port(tail[1:]) if tail.startswith(":") else None
    host, colon, port = text.rpartition(":")
    return (host, _port(port)) if colon else (text, None)


def _port(text: str) -> int | None:
    if text == "":
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"the port {text!r} is not a number from 1 to 65535")
    return int(text)


def _hostport(host: str, port: int | None) -> str:
    return f"{quote(host, safe='[]:')}:{port}" if port else quote(host, safe="[]:")


def _session_attrs(params: list[tuple[str, str]], role: Role) -> list[tuple[str, str]]:
    given = [v for k, v in params if k == "target_session_attrs"]
    rest = [(k, v) for k, v in params if k != "target_session_attrs"]
    if len(given) > 1:
        raise ValueError("target_session_attrs is given more than once")
    value = given[0] if given else ("read-write" if role is Role.PRIMARY else "prefer-standby")
    if value not in SESSION_ATTRS:
        raise ValueError(f"target_session_attrs {value!r} is not one of {', '.join(SESSION_ATTRS)}")
    if role is Role.PRIMARY and value in _PRIMARY_REFUSED:
        raise ValueError(
            f"database_url: target_session_attrs={value} could land writes on a standby; "
            "use read-write (the default) and put standbys in database_replica_url"
        )
    if role is Role.REPLICA and value in _REPLICA_REFUSED:
        raise ValueError(
            f"database_replica_url: target_session_attrs={value} reads from the primary; "
            "use prefer-standby (the default), standby, read-only or any"
        )
    return [*rest, ("target_session_attrs", value)]


def is_postgres(url: str) -> bool:
    return url.startswith("postgresql+asyncpg://")
