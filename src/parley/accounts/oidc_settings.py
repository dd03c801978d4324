"""OpenID Connect providers users may sign in with (``accounts.oidc``), and the rules that
map their claims to a tier and a role at every sign-in."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr

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


class OidcProvider(BaseModel):
    model_config = {"extra": "forbid"}

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$", description="In the sign-in URL.")
    label: str = Field(default="", max_length=60, description="The button's text.")
    issuer: str = Field(pattern=r"^https?://\S+$", description="Its discovery is read from here.")
    client_id: str
    client_secret: SecretStr | None = None
    scope: str = "openid email profile"
    link_verified_email: bool = Field(
        default=False,
        description="A first sign-in whose verified email is an existing account's signs in "
        "to it; otherwise it is refused (never linked by an unverified email).",
    )
    rules: list[ClaimRule] = Field(default_factory=list)
    state_seconds: float = Field(default=600, gt=0, description="Time to finish signing in.")
