"""The settings' former flat names, still read: each names the section and field it now is.

A flat name given as a keyword (the CLI's flags, tests), in the TOML file (``database_url =
…`` at the top, ``[builtin_engine]``) or in the environment (``PARLEY_DATABASE_URL``,
``PARLEY_BUILTIN_ENGINE__MODEL``) is moved to its section (``database.url``,
``engines.builtin.model``) before the settings are validated. Each source is rewritten on
its own, so the sources' order still decides (keywords, then the environment, then the
file); within one source a section's own name wins over a flat one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource


def _same(section: str, *names: str) -> dict[str, tuple[str, str]]:
    return {name: (section, name) for name in names}


ALIASES: Mapping[str, tuple[str, str]] = {
    **_same("http", "host", "port", "public_url", "trusted_proxies", "cookie_secure"),
    **_same("http", "api_docs", "max_body_bytes", "default_page_size", "max_page_size"),
    "database_url": ("database", "url"),
    "database_echo": ("database", "echo"),
    "database_replica_url": ("database", "replica_url"),
    "database_connect_timeout_seconds": ("database", "connect_timeout_seconds"),
    "database_pool_size": ("database", "pool_size"),
    **_same("database", "read_your_writes_seconds"),
    **_same("bus", "redis_url", "redis_namespace", "stream_maxlen", "stream_ttl_seconds"),
    **_same("bus", "stream_append_batching"),
    **_same(
        "accounts",
        "session_ttl_seconds",
        "session_idle_timeout_seconds",
        "auth_cache_seconds",
        "max_key_name_chars",
        "login_free_failures",
        "login_failure_window_seconds",
        "login_max_delay_seconds",
        "login_email_free_failures",
        "login_email_max_delay_seconds",
        "signup_free_attempts_per_address",
        "signup_window_seconds",
    ),
    **_same(
        "runs",
        "max_message_chars",
        "max_title_chars",
        "worker_concurrency",
        "reserved_slots",
        "lease_seconds",
        "sweep_interval_seconds",
        "requeue_stale_after_seconds",
        "max_run_attempts",
        "ping_interval_seconds",
        "max_open_streams_per_user",
        "idempotency_ttl_seconds",
    ),
    **_same("qos", "tiers", "default_tier", "default_max_tokens", "queue_max"),
    **_same("qos", "load_window_seconds"),
    "engine": ("engines", "kind"),
    "models": ("engines", "models"),
    "builtin_engine": ("engines", "builtin"),
    "fake_engine": ("engines", "fake"),
    **_same(
        "observability",
        "log_format",
        "otlp_endpoint",
        "trace_sample_ratio",
        "service_name",
        "metrics_dir",
        "metrics_token",
        "metrics_port",
        "metrics_sample_seconds",
    ),
}


# a section's field -> its former flat name (error messages name both)
FORMER_NAMES: Mapping[tuple[str, ...], str] = {place: name for name, place in ALIASES.items()}


def nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each flat name moved into its section (a section's own key wins)."""
    out: dict[str, Any] = {}
    moved: list[tuple[str, str, Any]] = []
    for key, value in values.items():
        if key in ALIASES:
            moved.append((*ALIASES[key], value))
        else:
            out[key] = value
    for section, field, value in moved:
        part = out.setdefault(section, {})
        if isinstance(part, dict):
            part.setdefault(field, value)
    return out


class Renamed(PydanticBaseSettingsSource):
    """Another source's values, their flat names moved into sections."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self._inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return nested(self._inner())


class FlatEnvironment(PydanticBaseSettingsSource):
    """``PARLEY_<FLAT NAME>`` and ``PARLEY_<FLAT NAME>__<field>…`` from the environment, moved
    into their sections; a value that looks like JSON (``[…]``, ``{…}``) is decoded."""

    PREFIX = "PARLEY_"

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, raw in os.environ.items():
            upper = name.upper()
            if not upper.startswith(self.PREFIX):
                continue
            path = upper[len(self.PREFIX) :].lower().split("__")
            if path[0] in ALIASES:
                _put(found, path, _decoded(raw))
        return nested(found)


def _put(into: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        into = into.setdefault(part, {})
        if not isinstance(into, dict):  # the whole value given too: that one holds
            return
    into[path[-1]] = value


def _decoded(raw: str) -> Any:
    text = raw.strip()
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except ValueError:
            return raw
    return raw
