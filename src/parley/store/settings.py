"""The database section (``[database]``, ``PARLEY_DATABASE__…``; the former flat names such
as ``PARLEY_DATABASE_URL`` still read): where the data lives, its standbys, its pools."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from parley.store.urls import Role, normalize_database_url


class DatabaseSettings(BaseModel):
    model_config = {"extra": "forbid"}

    url: str | None = Field(
        default=None,
        description="sqlite:///PATH or postgresql://…; defaults to SQLite in data_dir.",
    )
    echo: bool = Field(default=False, description="Log every SQL statement (debugging).")
    # failover and read replicas (docs/FAILOVER.md; store/urls.py, store/routing.py)
    replica_url: str | None = Field(
        default=None,
        description="Postgres standbys for reads that tolerate a little lag (chat list, "
        "history); several hosts the libpq way; target_session_attrs prefer-standby.",
    )
    connect_timeout_seconds: float = Field(
        default=5, gt=0, le=120, description="A connection attempt's limit, per host."
    )
    pool_size: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="Postgres connections a process keeps open per pool (primary, replica), "
        "and as many more under a burst; a request that finds them all busy waits, then 503.",
    )
    read_your_writes_seconds: float = Field(
        default=5, ge=0, description="A user's reads stay on the primary this long after a write."
    )

    @field_validator("url")
    @classmethod
    def _async_driver(cls, url: str | None) -> str | None:
        return None if url is None else normalize_database_url(url)

    @field_validator("replica_url")
    @classmethod
    def _replica(cls, url: str | None) -> str | None:
        return None if url is None else normalize_database_url(url, Role.REPLICA)

    @property
    def resolved_url(self) -> str:
        """The URL: ``url`` as given, or (the root settings fill it) SQLite in data_dir."""
        if self.url is None:
            raise ValueError("the database url is filled in when the settings are loaded")
        return self.url
