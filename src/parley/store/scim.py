"""What identity providers provisioned over SCIM (``scim/``): each User or Group resource
as the provider last wrote it (one JSON document, without its id and meta), a User's
parley account, and the groups' members (a table, so a user's groups are one query)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from parley.store.schema import ID, Base


class ScimResource(Base):
    __tablename__ = "scim_resources"
    __table_args__ = (Index("ix_scim_resources_kind_name", "kind", "name"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    # "User" or "Group"
    kind: Mapped[str] = mapped_column(String(10))
    # a User's account (its row deleted with the account)
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), unique=True
    )
    # a User's userName (unique, compared without case) or a Group's displayName, lowered
    name: Mapped[str] = mapped_column(String(300))
    external_id: Mapped[str | None] = mapped_column(String(300), index=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    version: Mapped[int]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ScimMember(Base):
    """A Group's member: a User (or a Group: kept, though rules read direct groups only)."""

    __tablename__ = "scim_members"

    group_id: Mapped[str] = mapped_column(
        ForeignKey("scim_resources.id", ondelete="CASCADE"), primary_key=True
    )
    member_id: Mapped[str] = mapped_column(
        ForeignKey("scim_resources.id", ondelete="CASCADE"), primary_key=True, index=True
    )


async def get(s: AsyncSession, kind: str, resource_id: str) -> ScimResource | None:
    found = await s.get(ScimResource, resource_id)
    return found if found is not None and found.kind == kind else None


async def of_user(s: AsyncSession, user_id: str) -> ScimResource | None:
    found = await s.scalars(select(ScimResource).where(ScimResource.user_id == user_id))
    return found.first()


async def named(s: AsyncSession, kind: str, name: str) -> list[ScimResource]:
    """Those of a kind with this name (a User's userName, a Group's displayName)."""
    query = select(ScimResource).where(ScimResource.kind == kind, ScimResource.name == name)
    return list(await s.scalars(query))


async def with_external_id(s: AsyncSession, kind: str, external_id: str) -> list[ScimResource]:
    query = select(ScimResource).where(
        ScimResource.kind == kind, ScimResource.external_id == external_id
    )
    return list(await s.scalars(query))


async def of_kind(s: AsyncSession, kind: str) -> list[ScimResource]:
    query = select(ScimResource).where(ScimResource.kind == kind).order_by(ScimResource.id)
    return list(await s.scalars(query))


async def count(s: AsyncSession, kind: str) -> int:
    query = select(func.count()).select_from(ScimResource).where(ScimResource.kind == kind)
    return int((await s.execute(query)).scalar_one())


async def members(s: AsyncSession, group_id: str) -> list[ScimResource]:
    query = (
        select(ScimResource)
        .join(ScimMember, ScimMember.member_id == ScimResource.id)
        .where(ScimMember.group_id == group_id)
        .order_by(ScimResource.id)
    )
    return list(await s.scalars(query))


async def groups_of(s: AsyncSession, member_id: str) -> list[ScimResource]:
    query = (
        select(ScimResource)
        .join(ScimMember, ScimMember.group_id == ScimResource.id)
        .where(ScimMember.member_id == member_id)
        .order_by(ScimResource.id)
    )
    return list(await s.scalars(query))


async def set_members(s: AsyncSession, group_id: str, member_ids: list[str]) -> set[str]:
    """The group's members are these now; returns every member it had or has."""
    before = set(
        await s.scalars(select(ScimMember.member_id).where(ScimMember.group_id == group_id))
    )
    await s.execute(delete(ScimMember).where(ScimMember.group_id == group_id))
    for member_id in dict.fromkeys(member_ids):
        s.add(ScimMember(group_id=group_id, member_id=member_id))
    await s.flush()
    return before | set(member_ids)


async def links(s: AsyncSession, ids: list[str]) -> list[tuple[str, str]]:
    """(group, member) of every membership of these resources, on either side."""
    if not ids:
        return []
    query = select(ScimMember.group_id, ScimMember.member_id).where(
        ScimMember.group_id.in_(ids) | ScimMember.member_id.in_(ids)
    )
    return [(g, m) for g, m in (await s.execute(query)).all()]


async def by_ids(s: AsyncSession, ids: set[str]) -> dict[str, ScimResource]:
    if not ids:
        return {}
    found = await s.scalars(select(ScimResource).where(ScimResource.id.in_(ids)))
    return {r.id: r for r in found}
