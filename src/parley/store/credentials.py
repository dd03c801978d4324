"""Queries on the two kinds of credential: login sessions and API keys.

Only SHA-256 hashes of the secrets are stored; a lookup hashes what the client
sent. Revocation sets ``revoked_at``; expired or revoked rows never authenticate.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import new_id, utcnow
from parley.store.schema import ApiKey, Session

# A session's or key's last_used_at is refreshed at most this often, so reads stay reads.
LAST_USED_GRANULARITY = timedelta(minutes=1)


async def create_session(
    s: AsyncSession,
    *,
    user_id: str,
    token_hash: str,
    ttl: timedelta,
    user_agent: str | None = None,
    address: str | None = None,
) -> Session:
    now = utcnow()
    row = Session(
        id=new_id("sess"),
        user_id=user_id,
        token_hash=token_hash,
        user_agent=user_agent,
        address=address,
        created_at=now,
        expires_at=now + ttl,
        last_used_at=now,  # logging in is a use
        revoked_at=None,
    )
    s.add(row)
    await s.flush()
    return row


def session_live(row: Session, now: datetime, idle: timedelta) -> bool:
    """Not revoked, not expired, and used within ``idle``."""
    last_used = row.last_used_at or row.created_at
    return row.revoked_at is None and row.expires_at > now and now - last_used < idle


async def find_live_session(
    s: AsyncSession, token_hash: str, now: datetime, idle: timedelta
) -> Session | None:
    row = await s.scalar(
        select(Session).where(
            Session.token_hash == token_hash,
            Session.revoked_at.is_(None),
            Session.expires_at > now,
        )
    )
    return row if row is not None and session_live(row, now, idle) else None


async def touch_session(s: AsyncSession, session: Session, now: datetime) -> None:
    """Record a use; written at most once a LAST_USED_GRANULARITY, so reads stay reads."""
    if session.last_used_at is None or now - session.last_used_at > LAST_USED_GRANULARITY:
        session.last_used_at = now


async def list_live_sessions(
    s: AsyncSession, user_id: str, now: datetime, idle: timedelta
) -> list[Session]:
    """The user's sessions that still authenticate, most recently used first."""
    rows = await s.scalars(
        select(Session)
        .where(Session.user_id == user_id, Session.revoked_at.is_(None), Session.expires_at > now)
        .order_by(Session.created_at.desc(), Session.id.desc())
    )
    live = [row for row in rows if session_live(row, now, idle)]
    return sorted(live, key=lambda row: row.last_used_at or row.created_at, reverse=True)


async def revoke_session(s: AsyncSession, *, user_id: str, session_id: str) -> bool:
    """Revoke one of the user's sessions; False if it is not theirs or was revoked already."""
    result = await s.execute(
        update(Session)
        .where(Session.user_id == user_id, Session.id == session_id, Session.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    return bool(getattr(result, "rowcount", 0))


async def revoke_sessions(s: AsyncSession, *, user_id: str, keep: str | None = None) -> int:
    """Revoke every live session of the user but ``keep``; how many were revoked."""
    now = utcnow()
    query = update(Session).where(
        Session.user_id == user_id, Session.revoked_at.is_(None), Session.expires_at > now
    )
    if keep is not None:
        query = query.where(Session.id != keep)
    result = await s.execute(query.values(revoked_at=now))
    return int(getattr(result, "rowcount", 0))


async def revoke_api_keys(s: AsyncSession, *, user_id: str) -> int:
    """Revoke every live API key of the user; how many were revoked."""
    result = await s.execute(
        update(ApiKey)
        .where(ApiKey.user_id == user_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    return int(getattr(result, "rowcount", 0))


async def create_api_key(
    s: AsyncSession,
    *,
    user_id: str,
    name: str,
    token_hash: str,
    hint: str,
    scopes: list[str] | None = None,
    models: list[str] | None = None,
    expires_at: datetime | None = None,
) -> ApiKey:
    row = ApiKey(
        id=new_id("key"),
        user_id=user_id,
        name=name,
        token_hash=token_hash,
        hint=hint,
        scopes=None if scopes is None else json.dumps(sorted(scopes)),
        models=None if models is None else json.dumps(models),
        expires_at=expires_at,
        created_at=utcnow(),
        last_used_at=None,
        revoked_at=None,
    )
    s.add(row)
    await s.flush()
    return row


async def find_live_api_key(s: AsyncSession, token_hash: str, now: datetime) -> ApiKey | None:
    """The key, unless revoked or expired."""
    return await s.scalar(
        select(ApiKey).where(
            ApiKey.token_hash == token_hash,
            ApiKey.revoked_at.is_(None),
            (ApiKey.expires_at.is_(None)) | (ApiKey.expires_at > now),
        )
    )


async def touch_api_key(
    s: AsyncSession, key: ApiKey, now: datetime, address: str | None = None
) -> None:
    moved = address is not None and address != key.last_used_address
    if moved or key.last_used_at is None or now - key.last_used_at > LAST_USED_GRANULARITY:
        key.last_used_at = now
        key.last_used_address = address or key.last_used_address


async def list_api_keys(s: AsyncSession, user_id: str) -> list[ApiKey]:
    return list(
        await s.scalars(
            select(ApiKey)
            .where(ApiKey.user_id == user_id, ApiKey.revoked_at.is_(None))
            .order_by(ApiKey.created_at.desc(), ApiKey.id.desc())
        )
    )


async def revoke_api_key(s: AsyncSession, *, user_id: str, key_id: str) -> bool:
    result = await s.execute(
        update(ApiKey)
        .where(ApiKey.user_id == user_id, ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )
    return bool(getattr(result, "rowcount", 0))
