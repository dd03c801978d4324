"""The mail section (``[mail]``, ``PARLEY_MAIL__…``): the SMTP server parley sends through.
Unset ``host``: no mail (resets are then the operator's: the CLI, the admin console)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field, SecretStr


class MailSecurity(StrEnum):
    STARTTLS = "starttls"  # plain connection upgraded (port 587)
    TLS = "tls"  # TLS from the first byte (port 465)
    NONE = "none"  # no encryption: only a relay on this host or network


class MailSettings(BaseModel):
    model_config = {"extra": "forbid"}

    host: str | None = Field(default=None, description="The SMTP server; unset: no mail.")
    port: int = Field(default=587, ge=1, le=65535)
    security: MailSecurity = MailSecurity.STARTTLS
    username: str | None = None
    password: SecretStr | None = Field(
        default=None, description="Set it in the environment: `PARLEY_MAIL__PASSWORD`."
    )
    from_address: str = Field(default="parley@localhost", description="The mails' From.")
    ca_file: str | None = Field(
        default=None, description="A CA bundle to check the server's certificate with."
    )
    timeout_seconds: float = Field(default=10, gt=0, le=120)
    retry_seconds: float = Field(
        default=30, gt=0, description="A failed send is tried again after this, doubling."
    )
    give_up_seconds: float = Field(
        default=6 * 3600, gt=0, description="A mail not sent in this long is dropped."
    )
    poll_seconds: float = Field(default=1, gt=0, description="How often the outbox is read.")

    @property
    def enabled(self) -> bool:
        return self.host is not None
