"""Settings, validated once at start-up.

Sources, highest priority first: keyword arguments (the CLI's flags), the
environment (``PARLEY_…``, nested with ``__``), an optional TOML file
(``--config`` or ``PARLEY_CONFIG_FILE``), then the defaults below. Nothing here
runs at import time: call :func:`load_settings`.
"""

from __future__ import annotations

import json
import logging
import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    Field,
    IPvAnyNetwork,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from parley.attachments.settings import AttachmentSettings
from parley.blobs.settings import ArchiveSettings, BlobSettings, PortabilitySettings
from parley.context.settings import ContextSettings
from parley.engines.settings import (
    BuiltinEngineSettings,
    EngineKind,
    FakeEngineSettings,
    ModelSettings,
    ReplicaSettings,
    UpstreamSettings,
)
from parley.errors import ConfigurationError
from parley.logs import LogFormat
from parley.parsing.settings import ParsingSettings
from parley.safety.settings import SafetySettings, check_tiers
from parley.settings_file import TomlFileSource
from parley.store.urls import Role, is_postgres, normalize_database_url
from parley.tiers import TierSettings, default_tiers

log = logging.getLogger(__name__)

__all__ = [
    "BuiltinEngineSettings",
    "EngineKind",
    "Environment",
    "FakeEngineSettings",
    "LogFormat",
    "ModelSettings",
    "ReplicaSettings",
    "Settings",
    "TierSettings",
    "UpstreamSettings",
    "load_settings",
    "normalize_database_url",
]

DEFAULT_SECRET = "change-me"  # noqa: S105 - the sentinel that production refuses


class Environment(StrEnum):
    DEVELOPMENT = "development"
    PRODUCTION = "production"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PARLEY_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    config_file: Path | None = None
    environment: Environment = Environment.DEVELOPMENT
    secret_key: SecretStr = SecretStr(DEFAULT_SECRET)

    data_dir: Path = Path("data")
    database_url: str | None = Field(
        default=None,
        description="sqlite:///PATH or postgresql://…; defaults to SQLite in data_dir.",
    )
    database_echo: bool = False
    # failover and read replicas (docs/FAILOVER.md; store/urls.py, store/routing.py)
    database_replica_url: str | None = Field(
        default=None,
        description="Postgres standbys for reads that tolerate a little lag (chat list, "
        "history); several hosts the libpq way; target_session_attrs prefer-standby.",
    )
    database_connect_timeout_seconds: float = Field(default=5, gt=0, le=120)
    database_pool_size: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="Postgres connections a process keeps open per pool (primary, replica), "
        "and as many more under a burst; a request that finds them all busy waits, then 503.",
    )
    read_your_writes_seconds: float = Field(
        default=5, ge=0, description="A user's reads stay on the primary this long after a write."
    )

    log_format: LogFormat = Field(
        default=LogFormat.AUTO,
        description="Log lines: json, text, or auto (JSON unless stderr is a terminal).",
    )
    # traces (parley.observability.tracing): off unless an OTLP endpoint is configured
    otlp_endpoint: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s]+$",
        description="OTLP/HTTP collector (http://host:4318); spans go to its /v1/traces.",
    )
    trace_sample_ratio: float = Field(
        default=1.0, ge=0, le=1, description="Traces sampled where no caller decided."
    )
    service_name: str | None = Field(
        default=None, description="Spans' service.name; default parley-api, -worker or -serve."
    )

    crash_at: str | None = Field(
        default=None,
        pattern=r"^[a-z]+\.[a-z]+(:[1-9][0-9]{0,5})?$",
        description="Tests only (parley.crashpoints): die at this point; refused in production.",
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)

    session_ttl_seconds: int = Field(default=30 * 24 * 3600, gt=0)
    cookie_secure: bool | None = Field(
        default=None, description="Secure cookies; defaults to on in production."
    )

    max_body_bytes: int = Field(default=1_048_576, gt=0)
    max_message_chars: int = Field(default=32_000, gt=0)
    max_title_chars: int = Field(default=200, gt=0)
    max_key_name_chars: int = Field(default=100, gt=0)
    default_page_size: int = Field(default=20, gt=0)
    max_page_size: int = Field(default=100, gt=0)

    # -- HTTP edge hardening
    api_docs: bool | None = Field(
        default=None,
        description="Serve /openapi.json and /docs; default: on in development, off in production.",
    )

    login_free_failures: int = Field(default=5, ge=1)
    login_failure_window_seconds: int = Field(default=900, gt=0)
    login_max_delay_seconds: int = Field(default=900, gt=0)

    # -- accounts hardening
    session_idle_timeout_seconds: int = Field(
        default=7 * 24 * 3600, ge=120, description="A session unused this long is refused."
    )
    # how long a process trusts an API key it checked (0: every time); a revocation made in
    # another process takes effect here within it (accounts/credential_cache.py)
    auth_cache_seconds: float = Field(default=5, ge=0, le=300)
    # login_free_failures (above) count per (email, client address); past them: 429
    login_email_free_failures: int = Field(
        default=20, ge=1, description="Failures for one email, any address, before slowing."
    )
    login_email_max_delay_seconds: float = Field(
        default=10, gt=0, description="The longest a login for a much-failed email is held."
    )
    signup_free_attempts_per_address: int = Field(default=20, ge=1)
    signup_window_seconds: int = Field(default=3600, gt=0)
    trusted_proxies: Annotated[list[IPvAnyNetwork], NoDecode] = Field(
        default_factory=list,
        description="Addresses/CIDRs whose X-Forwarded-For is believed; none by default.",
    )
    public_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="Where users reach parley; https turns on HSTS and Secure cookies.",
    )

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _address_list(cls, value: Any) -> Any:
        """From the environment: a JSON list, or addresses separated by commas."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    # -- end accounts hardening

    tiers: dict[str, TierSettings] = Field(default_factory=default_tiers)
    default_tier: str = "free"

    redis_url: str | None = Field(
        default=None, description="redis://…; without it the bus is in-process (one process)."
    )
    redis_namespace: str = Field(
        default="parley", pattern=r"^[A-Za-z0-9_.:-]+$", description="Prefix of every Redis key."
    )
    engine: EngineKind = Field(
        default=EngineKind.BUILTIN,
        description="The one model's engine when `models` is empty (builtin or fake).",
    )
    models: list[ModelSettings] = Field(
        default_factory=list,
        description="The models served, the first the default; empty: one, of `engine`.",
    )
    builtin_engine: BuiltinEngineSettings = Field(default_factory=BuiltinEngineSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    fake_engine: FakeEngineSettings = Field(default_factory=FakeEngineSettings)
    safety: SafetySettings = Field(default_factory=SafetySettings)  # docs/SAFETY.md
    blobs: BlobSettings = Field(default_factory=BlobSettings)  # archive and exports
    archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
    portability: PortabilitySettings = Field(default_factory=PortabilitySettings)
    attachments: AttachmentSettings = Field(default_factory=AttachmentSettings)  # issue 21
    parsing: ParsingSettings = Field(default_factory=ParsingSettings)  # untrusted files
    default_max_tokens: int = Field(default=512, gt=0)
    worker_concurrency: int | None = Field(
        default=None, gt=0, description="Runs one worker executes at once; default: engine slots."
    )
    reserved_slots: int = Field(
        default=0,
        ge=0,
        description="Slots each worker keeps for the highest-priority tier: a run of a lower "
        "priority starts only while more than this many of the worker's slots are free.",
    )
    lease_seconds: float = Field(default=15, gt=0)
    sweep_interval_seconds: float = Field(default=2, gt=0)
    requeue_stale_after_seconds: float = Field(default=10, gt=0)
    max_run_attempts: int = Field(default=3, gt=0)
    queue_max: int = Field(default=1000, gt=0)
    load_window_seconds: float = Field(
        default=30, gt=0, le=300, description="How far back a model's drain rate looks."
    )
    stream_maxlen: int = Field(default=20_000, gt=0)
    stream_ttl_seconds: float = Field(default=3600, gt=0)
    stream_append_batching: bool = Field(
        default=True,
        description="A process's appends to run streams queued while one round trip to Redis "
        "is out go together, pipelined, in the next (one round trip per flush for all runs, "
        "not one per token per run); false: each alone.",
    )
    ping_interval_seconds: float = Field(default=15, gt=0)
    max_open_streams_per_user: int = Field(default=8, gt=0)
    idempotency_ttl_seconds: int = Field(default=24 * 3600, gt=0)

    # -- observability
    metrics_dir: Path | None = Field(
        default=None,
        description="A directory every parley process of this host writes its metrics to "
        "(prometheus_client's multiprocess mode): /metrics of any shows them all. It must "
        "exist and be writable; empty it before the processes start.",
    )
    metrics_token: SecretStr | None = Field(
        default=None, description="When set, /metrics needs 'Authorization: Bearer <token>'."
    )
    metrics_port: int | None = Field(
        default=None, ge=1, le=65535, description="parley worker: serve its own /metrics here."
    )
    metrics_sample_seconds: float = Field(
        default=5, gt=0, description="How often a process with an engine samples its load."
    )

    @field_validator("metrics_dir")
    @classmethod
    def _writable_directory(cls, path: Path | None) -> Path | None:
        if path is None:
            return None
        path = path.resolve()
        if not path.is_dir():
            raise ValueError(f"{path} is not a directory (create it before starting parley)")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"{path} is not writable by this process")
        return path

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path: Path | str | None = None
        if isinstance(init_settings, InitSettingsSource):
            path = init_settings.init_kwargs.get("config_file")
        path = path or os.environ.get("PARLEY_CONFIG_FILE")
        toml = TomlFileSource(settings_cls, Path(path) if path else None)
        return (init_settings, env_settings, toml)

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, url: str | None) -> str | None:
        return None if url is None else normalize_database_url(url)

    @field_validator("database_replica_url")
    @classmethod
    def _replica(cls, url: str | None) -> str | None:
        return None if url is None else normalize_database_url(url, Role.REPLICA)

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if not self.tiers:
            raise ValueError("at least one tier must be configured")
        if self.default_tier not in self.tiers:
            raise ValueError(
                f"default_tier {self.default_tier!r} is not one of the tiers {sorted(self.tiers)}"
            )
        if self.stream_maxlen <= max(t.max_output_tokens for t in self.tiers.values()) + 16:
            raise ValueError("stream_maxlen must exceed every tier's max_output_tokens")
        self._check_models()
        check_tiers(self.safety, self.tiers)
        if self.database_replica_url and not is_postgres(self.resolved_database_url):
            raise ValueError("database_replica_url needs a Postgres database_url")
        if self.default_page_size > self.max_page_size:
            raise ValueError("default_page_size must not exceed max_page_size")
        if self.environment is Environment.PRODUCTION and self.crash_at:
            raise ValueError("crash_at is for tests: it is refused in production")
        if (
            self.environment is Environment.PRODUCTION
            and self.secret_key.get_secret_value() == DEFAULT_SECRET
        ):
            raise ValueError(
                "secret_key is left at its default; set PARLEY_SECRET_KEY to a long random "
                "value (for example: python -c 'import secrets; print(secrets.token_urlsafe(48))')"
            )
        return self

    def _check_models(self) -> None:
        if not self.models and self.engine is EngineKind.OPENAI:
            raise ValueError("engine openai needs its replicas: configure it under `models`")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError("two models have one name")
        for kind in (EngineKind.BUILTIN, EngineKind.FAKE):
            if sum(m.engine is kind for m in self.models) > 1:
                raise ValueError(f"at most one model may use the {kind.value} engine")

    @property
    def top_priority(self) -> int:
        """The highest tier's priority: its runs alone may take a worker's reserved slots."""
        return max(t.priority for t in self.tiers.values())

    def tier(self, name: str) -> TierSettings:
        """A tier's settings; a user on a tier no longer configured gets the default tier's."""
        return self.tiers.get(name) or self.tiers[self.default_tier]

    def default_output(self, tier: TierSettings) -> int:
        """A run's output allowance when it names none: ``default_max_tokens``, within the
        tier's ``max_output_tokens``."""
        return min(self.default_max_tokens, tier.max_output_tokens)

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'parley.db').resolve()}"

    @property
    def secure_cookies(self) -> bool:
        if self.cookie_secure is not None:
            return self.cookie_secure
        return self.environment is Environment.PRODUCTION or self.https

    @property
    def https(self) -> bool:
        """The public URL is https (HSTS is sent, cookies are Secure)."""
        return (self.public_url or "").lower().startswith("https://")


def load_settings(**overrides: Any) -> Settings:
    """Build and validate the settings; raise ConfigurationError with a readable reason."""
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        reasons = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in e.errors()
        )
        raise ConfigurationError(f"invalid settings: {reasons}") from e
    if settings.secret_key.get_secret_value() == DEFAULT_SECRET:
        log.warning("secret_key is at its default: fine for development, refused in production")
    return settings
