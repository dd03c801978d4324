"""The HTTP section (``[http]``, ``PARLEY_HTTP__…``; the former flat names such as
``PARLEY_PORT`` still read): where parley listens, what it trusts at its edge, and the
sizes of what it reads and pages."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, Field, IPvAnyNetwork, field_validator, model_validator
from pydantic_settings import NoDecode


class HttpSettings(BaseModel):
    model_config = {"extra": "forbid"}

    host: str = Field(default="127.0.0.1", description="The address to listen on.")
    port: int = Field(default=8000, ge=0, le=65535, description="The port to listen on.")
    shutdown_grace_seconds: int = Field(
        default=20,
        gt=0,
        description="On SIGTERM: how long open streams may go on before they are closed "
        "(/api streams are told at once to resume by Last-Event-ID on another api process; "
        "a quiet one hears it at its next keep-alive).",
    )
    public_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="Where users reach parley; https turns on HSTS and Secure cookies.",
    )
    trusted_proxies: Annotated[list[IPvAnyNetwork], NoDecode] = Field(
        default_factory=list,
        description="Addresses/CIDRs whose X-Forwarded-For is believed; none by default.",
    )
    cookie_secure: bool | None = Field(
        default=None, description="Secure cookies; defaults to on in production or over https."
    )
    api_docs: bool | None = Field(
        default=None,
        description="Serve /openapi.json and /docs; default: on in development, off in production.",
    )
    max_body_bytes: int = Field(
        default=1_048_576, gt=0, description="A request body's limit (uploads and imports aside)."
    )
    default_page_size: int = Field(default=20, gt=0, description="Items a page lists by default.")
    max_page_size: int = Field(default=100, gt=0, description="Items a page lists at most.")

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

    @model_validator(mode="after")
    def _pages(self) -> HttpSettings:
        if self.default_page_size > self.max_page_size:
            raise ValueError("default_page_size must not exceed max_page_size")
        return self

    @property
    def https(self) -> bool:
        """The public URL is https (HSTS is sent, cookies are Secure)."""
        return (self.public_url or "").lower().startswith("https://")

    def fill(self, *, production: bool) -> None:
        """``cookie_secure`` and ``api_docs`` decided: by the environment where not given."""
        if self.cookie_secure is None:
            self.cookie_secure = production or self.https
        if self.api_docs is None:
            self.api_docs = not production
