"""Who a request acts for: the one type every layer past authentication passes around."""

from __future__ import annotations

from dataclasses import dataclass

from parley.domain import CredentialKind, UserRole


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts for, and by which credential."""

    user_id: str
    email: str
    tier: str
    kind: CredentialKind
    credential_id: str
    role: UserRole = UserRole.USER
    # an API key's scopes and models (None: a login session, which may do everything)
    scopes: frozenset[str] | None = None
    models: tuple[str, ...] | None = None
    # False only while accounts.confirm_email asks and the user has not confirmed
    email_confirmed: bool = True

    @property
    def key_id(self) -> str | None:
        """The API key this request was made with (None: a login session)."""
        return self.credential_id if self.kind is CredentialKind.API_KEY else None

    def may_use(self, model: str) -> bool:
        """Whether this credential may use the model (its tier is checked apart)."""
        return self.models is None or model in self.models
