"""The tools section (``[tools]``, ``PARLEY_TOOLS__…``): what the server-side tools may do."""

from __future__ import annotations

from ipaddress import ip_network

from pydantic import BaseModel, Field, field_validator


class FetchSettings(BaseModel):
    """``fetch_url``: an HTTP(S) GET of a page for the model."""

    model_config = {"extra": "forbid"}

    max_bytes: int = Field(default=2_000_000, gt=0, description="A body's bytes, at most.")
    timeout_seconds: float = Field(default=10, gt=0, description="A fetch, redirects included.")
    max_redirects: int = Field(default=5, ge=0)
    max_text_chars: int = Field(
        default=20_000, gt=0, description="The page's readable text given to the model."
    )
    allow_networks: list[str] = Field(
        default_factory=list,
        description="Address ranges (CIDR) fetched although not public: an intranet the "
        "operator allows. Loopback, private, link-local and metadata addresses are refused "
        "otherwise, checked after DNS resolution and on every redirect.",
    )
    user_agent: str = "parley-fetch/1 (+https://github.com/parley)"

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            ip_network(network, strict=False)  # ValueError names a bad range
        return value


class ToolSettings(BaseModel):
    model_config = {"extra": "forbid"}

    fetch: FetchSettings = Field(default_factory=FetchSettings)
