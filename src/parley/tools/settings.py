"""The tools section (``[tools]``, ``PARLEY_TOOLS__…``): what the server-side tools may do."""

from __future__ import annotations

from ipaddress import ip_network

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator


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


class SandboxSettings(BaseModel):
    """``run_python``: Python in a bubblewrap sandbox (no network, a read-only system, the
    chat's own scratch directory, run as an unprivileged user under resource limits)."""

    model_config = {"extra": "forbid"}

    bwrap: str = Field(default="bwrap", description="bubblewrap's command (Debian: bubblewrap).")
    python: str = Field(default="/usr/bin/python3", description="The Python the code runs in.")
    uid: int = Field(
        default=200_000,
        ge=1,
        description="The first of the user ids the code runs as: each parley user's code "
        "runs as one of its own (`uid` + a hash of the user, below `uid` + `uids`), so "
        "one user's fork bomb meets only their own process limit.",
    )
    uids: int = Field(default=50_000, ge=1, description="How many user ids, from `uid`.")
    cpu_seconds: int = Field(default=10, gt=0)
    wall_seconds: float = Field(default=30, gt=0)
    memory_mb: int = Field(default=512, gt=0)
    max_processes: int = Field(default=32, gt=0)
    max_file_mb: int = Field(default=50, gt=0, description="A file it writes, at most.")
    max_output_chars: int = Field(default=20_000, gt=0, description="What it prints, at most.")
    answer_files: int = Field(
        default=5,
        ge=0,
        description="Files a call writes or changes in /work that come back as attachments "
        "of the answer, at most (0: none).",
    )
    answer_file_mb: float = Field(
        default=10, gt=0, description="A file that comes back as an attachment, at most."
    )


class McpOAuthSettings(BaseModel):
    """A server whose tools act as the user: each user connects it once (OAuth 2.1 as the
    MCP spec describes: discovery, PKCE, dynamic client registration where the authorization
    server offers it, refresh); their tokens are kept encrypted on the server."""

    model_config = {"extra": "forbid"}

    client_id: str | None = Field(
        default=None,
        description="A client registered with the authorization server by the operator; "
        "none: parley registers itself (dynamic client registration).",
    )
    client_secret: SecretStr | None = Field(default=None, description="That client's secret.")
    scope: str | None = Field(
        default=None, description="The scopes asked for (space-separated); none: the server's."
    )
    connect_seconds: float = Field(
        default=600, gt=0, description="How long a user has to finish connecting."
    )


class McpServerSettings(BaseModel):
    """An MCP server whose tools chats may call: over Streamable HTTP (``url``) or a local
    command speaking stdio (``command``). A tier allows it as ``mcp:<name>``."""

    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")
    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    command: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict, description="For a stdio command.")
    timeout_seconds: float = Field(default=30, gt=0, description="One call, at most.")
    list_ttl_seconds: float = Field(default=300, ge=0, description="Its tool list, cached.")
    oauth: McpOAuthSettings | None = Field(
        default=None, description="Set: each user connects the server with their own account."
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.url is None) == (self.command is None):
            raise ValueError(f"MCP server {self.name!r}: give it a url or a command, not both")
        if self.oauth is not None and self.url is None:
            raise ValueError(f"MCP server {self.name!r}: oauth is for a server reached by url")
        return self


class ToolSettings(BaseModel):
    model_config = {"extra": "forbid"}

    fetch: FetchSettings = Field(default_factory=FetchSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    mcp_servers: list[McpServerSettings] = Field(default_factory=list)
    confirm: list[str] = Field(
        default_factory=list,
        description="Tools whose every call waits for the user's yes (`mcp:<server>`: all "
        "its tools).",
    )
    confirm_seconds: float = Field(
        default=120, gt=0, description="How long a call waits for it; then it is not made."
    )

    @model_validator(mode="after")
    def _unique(self) -> ToolSettings:
        names = [s.name for s in self.mcp_servers]
        if len(set(names)) != len(names):
            raise ValueError("two MCP servers have one name")
        return self
