"""Queries on MCP servers connected with the user's own account: parley's registration
with each server's authorization server, and each user's tokens (both stored sealed:
``parley/sealing.py``). Scoped by user first: one user's grant is never read for another."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, Text, delete, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from parley.domain import utcnow
from parley.store.schema import Base


class ToolClient(Base):
    """parley as a client of an MCP server's authorization server (``tools/mcp_oauth.py``):
    what it registered (dynamic client registration), for the redirect address it gave."""

    __tablename__ = "tool_clients"

    server: Mapped[str] = mapped_column(String(40), primary_key=True)
    redirect_uri: Mapped[str] = mapped_column(Text)
    # the registration (OAuthClientInformationFull), encrypted: it may hold a client secret
    sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]


class ToolGrant(Base):
    """A user's connection to an MCP server that acts as them: their tokens, encrypted
    (``tools/mcp_oauth.py``); deleted with the user or when they disconnect."""

    __tablename__ = "tool_grants"

    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    server: Mapped[str] = mapped_column(String(40), primary_key=True)
    # the tokens (OAuthToken: access, refresh, scope), encrypted
    sealed: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


async def client(s: AsyncSession, server: str) -> ToolClient | None:
    return await s.get(ToolClient, server)


async def keep_client(s: AsyncSession, server: str, redirect_uri: str, sealed: str) -> None:
    row = await s.get(ToolClient, server)
    if row is None:
        s.add(
            ToolClient(server=server, redirect_uri=redirect_uri, sealed=sealed, created_at=utcnow())
        )
    else:
        row.redirect_uri, row.sealed, row.created_at = redirect_uri, sealed, utcnow()
    await s.flush()


async def forget_client(s: AsyncSession, server: str) -> None:
    await s.execute(delete(ToolClient).where(ToolClient.server == server))


async def grant(s: AsyncSession, *, user_id: str, server: str) -> ToolGrant | None:
    return await s.get(ToolGrant, (user_id, server))


async def servers_of(s: AsyncSession, user_id: str) -> list[str]:
    """The servers the user has connected."""
    found = await s.scalars(select(ToolGrant.server).where(ToolGrant.user_id == user_id))
    return sorted(found)


async def keep_grant(
    s: AsyncSession, *, user_id: str, server: str, sealed: str, expires_at: datetime | None
) -> None:
    now = utcnow()
    row = await s.get(ToolGrant, (user_id, server))
    if row is None:
        row = ToolGrant(user_id=user_id, server=server, sealed=sealed, created_at=now)
        s.add(row)
    row.sealed, row.expires_at, row.updated_at = sealed, expires_at, now
    await s.flush()


async def forget_grant(s: AsyncSession, *, user_id: str, server: str) -> bool:
    """The user's grant for the server deleted (False: there was none)."""
    done = await s.execute(
        delete(ToolGrant).where(ToolGrant.user_id == user_id, ToolGrant.server == server)
    )
    return bool(getattr(done, "rowcount", 0))
