"""OpenID Connect providers users may sign in with (``accounts.oidc``), and the rules that
map their claims to a tier and a role at every sign-in."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field, SecretStr, model_validator

from parley.domain import UserRole


class ClaimRule(BaseModel):
    """``claim`` holding ``value`` (equal to it, or among a list claim such as ``groups``)
    sets the tier and/or the role; the first matching rule for each wins."""

    model_config = {"extra": "forbid"}

    claim: str = Field(min_length=1, max_length=100)
    value: str = Field(max_length=300)
    tier: str | None = None
    role: UserRole | None = None

    def matches(self, claims: dict[str, object]) -> bool:
        found = claims.get(self.claim)
        if isinstance(found, list):
            return self.value in [str(v) for v in found]
        return found is not None and str(found) == self.value


class ProviderKind(StrEnum):
    OIDC = "oidc"  # OpenID Connect: discovery, an ID token
    GITHUB = "github"  # GitHub's plain OAuth 2.0: the user and their emails from its API


OIDC_SCOPE = "openid email profile"
GITHUB_SCOPE = "read:user user:email"


class OidcProvider(BaseModel):
    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$", description="In the sign-in URL.")
    label: str = Field(default="", max_length=60, description="The button's text.")
    kind: ProviderKind = ProviderKind.OIDC
    issuer: str = Field(
        pattern=r"^https?://\S+$",
        description="OpenID Connect: its discovery is read from here; GitHub: its site "
        "(`https://github.com`, or a GitHub Enterprise Server's).",
    )
    api_url: str | None = Field(
        default=None,
        pattern=r"^https?://\S+$",
        description="GitHub's API (default `https://api.github.com` for github.com, else "
        "`<issuer>/api/v3`).",
    )
    client_id: str
    client_secret: SecretStr | None = None
    scope: str = Field(
        default=OIDC_SCOPE,
        description=f"Default `{OIDC_SCOPE}`; GitHub's `{GITHUB_SCOPE}` (add `read:org` for "
        "rules on `orgs`).",
    )
    link_verified_email: bool = Field(
        default=False,
        description="A first sign-in whose verified email is an existing account's signs in "
        "to it; otherwise it is refused (never linked by an unverified email).",
    )
    rules: list[ClaimRule] = Field(default_factory=list)
    state_seconds: float = Field(default=600, gt=0, description="Time to finish signing in.")

    @model_validator(mode="after")
    def _github_defaults(self) -> OidcProvider:
        if self.kind is ProviderKind.GITHUB:
            if self.scope == OIDC_SCOPE:
                self.scope = GITHUB_SCOPE
            if self.api_url is None:
                site = self.issuer.rstrip("/")
                github = site in ("https://github.com", "https://www.github.com")
                self.api_url = "https://api.github.com" if github else f"{site}/api/v3"
        return self
