"""Settings, validated once at start-up: the root composes each package's section.

Sources, highest priority first: keyword arguments (the CLI's flags), the environment
(``PARLEY_…``, nested with ``__``: ``PARLEY_DATABASE__URL``), an optional TOML file
(``--config`` or ``PARLEY_CONFIG_FILE``), then the defaults. The former flat names
(``PARLEY_DATABASE_URL``, ``database_url = …``) still read (``settings_aliases.py``).
Only the composition root (``services.py``) and the CLI read this root; every service takes
its own section. Nothing here runs at import time: call :func:`load_settings`.
"""

from __future__ import annotations

import logging
import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from parley.accounts.settings import AccountSettings
from parley.api.settings import HttpSettings
from parley.attachments.settings import AttachmentSettings
from parley.audit.settings import AuditSettings
from parley.blobs.settings import ArchiveSettings, BlobSettings, PortabilitySettings
from parley.bus.settings import BusSettings
from parley.context.settings import ContextSettings
from parley.engines.settings import EngineSettings
from parley.errors import ConfigurationError
from parley.mail.settings import MailSettings
from parley.observability.settings import ObservabilitySettings
from parley.parsing.settings import ParsingSettings
from parley.qos.settings import QosSettings
from parley.runs.settings import RunSettings
from parley.safety.settings import SafetySettings, check_tiers
from parley.scim.settings import ScimSettings
from parley.settings_aliases import FORMER_NAMES, FlatEnvironment, Renamed
from parley.settings_file import TomlFileSource
from parley.store.settings import DatabaseSettings
from parley.store.urls import is_postgres
from parley.tools.settings import ToolSettings

log = logging.getLogger(__name__)

__all__ = ["Environment", "Settings", "load_settings"]

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

    config_file: Path | None = Field(default=None, description="The TOML settings file.")
    environment: Environment = Field(
        default=Environment.DEVELOPMENT,
        description="production refuses the default secret_key and test-only settings.",
    )
    secret_key: SecretStr = Field(
        default=SecretStr(DEFAULT_SECRET),
        description="Signs sessions, cursors and links; long and random in production.",
    )
    data_dir: Path = Field(
        default=Path("data"), description="Where SQLite and local files live by default."
    )
    crash_at: str | None = Field(
        default=None,
        pattern=r"^[a-z]+\.[a-z]+(:[1-9][0-9]{0,5})?$",
        description="Tests only (parley.crashpoints): die at this point; refused in production.",
    )

    http: HttpSettings = Field(default_factory=HttpSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    bus: BusSettings = Field(default_factory=BusSettings)
    accounts: AccountSettings = Field(default_factory=AccountSettings)
    runs: RunSettings = Field(default_factory=RunSettings)
    qos: QosSettings = Field(default_factory=QosSettings)
    engines: EngineSettings = Field(default_factory=EngineSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    safety: SafetySettings = Field(default_factory=SafetySettings)  # docs/SAFETY.md
    blobs: BlobSettings = Field(default_factory=BlobSettings)  # archive and exports
    archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
    portability: PortabilitySettings = Field(default_factory=PortabilitySettings)
    attachments: AttachmentSettings = Field(default_factory=AttachmentSettings)
    parsing: ParsingSettings = Field(default_factory=ParsingSettings)  # untrusted files
    tools: ToolSettings = Field(default_factory=ToolSettings)  # what server-side tools may do
    audit: AuditSettings = Field(default_factory=AuditSettings)  # the audit log's retention
    scim: ScimSettings = Field(default_factory=ScimSettings)  # provisioning by identity providers
    mail: MailSettings = Field(default_factory=MailSettings)  # resets and notices by mail
    observability: ObservabilitySettings = Field(default_factory=ObservabilitySettings)

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
        return (
            Renamed(settings_cls, init_settings),
            env_settings,
            FlatEnvironment(settings_cls),
            Renamed(settings_cls, toml),
        )

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        production = self.environment is Environment.PRODUCTION
        top = max(t.max_output_tokens for t in self.qos.tiers.values())
        if self.bus.stream_maxlen <= top + 16:
            raise ValueError("stream_maxlen must exceed every tier's max_output_tokens")
        check_tiers(self.safety, self.qos.tiers)
        if self.database.url is None:
            self.database.url = f"sqlite+aiosqlite:///{(self.data_dir / 'parley.db').resolve()}"
        if self.database.replica_url and not is_postgres(self.database.resolved_url):
            raise ValueError("database_replica_url needs a Postgres database_url")
        if self.accounts.confirm_email != "off" and not self.mail.enabled:
            raise ValueError("accounts.confirm_email needs mail: set mail.host")
        if production and self.crash_at:
            raise ValueError("crash_at is for tests: it is refused in production")
        if production and self.secret_key.get_secret_value() == DEFAULT_SECRET:
            raise ValueError(
                "secret_key is left at its default; set PARLEY_SECRET_KEY to a long random "
                "value (for example: python -c 'import secrets; print(secrets.token_urlsafe(48))')"
            )
        self.http.fill(production=production)
        return self


def load_settings(*, warn_default_secret: bool = True, **overrides: Any) -> Settings:
    """Build and validate the settings; raise ConfigurationError with a readable reason."""
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        reasons = "; ".join(f"{_named(err['loc'])}: {err['msg']}" for err in e.errors())
        raise ConfigurationError(f"invalid settings: {reasons}") from e
    if warn_default_secret and settings.secret_key.get_secret_value() == DEFAULT_SECRET:
        log.warning("secret_key is at its default: fine for development, refused in production")
    return settings


def _named(loc: tuple[int | str, ...]) -> str:
    """A field's place, with its former flat name if it had one: ``database.pool_size
    (database_pool_size)``."""
    place = ".".join(str(p) for p in loc) or "settings"
    former = FORMER_NAMES.get(tuple(str(p) for p in loc[:2]))
    return place if former is None else f"{place} ({former})"
