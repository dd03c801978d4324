"""Where scim2-server's protocol handler reads and writes: ``store/scim.py``'s rows, each
User tied to a parley account (``scim/provisioning.py`` makes, changes and deprovisions it
in the same transaction). Searches by ``userName`` or ``externalId`` equality are one
indexed query; any other filter is evaluated (scim2-models' own evaluator) over the rows of
the type, then sorted and paged here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

from scim2_models import (
    InvalidValueException,
    NotFoundException,
    PreconditionFailedException,
    Resource,
    ResourceType,
    ResponseParameters,
    ScimFilter,
    ScimProvider,
    SearchRequest,
    UniquenessException,
)
from scim2_models.path import CompareOperator, Comparison
from scim2_server.storage import AsyncScimStorage, SearchPage
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from parley.domain import new_id, utcnow
from parley.scim.provisioning import Pending, Provisioning
from parley.scim.resources import GROUP, USER, assembled, body_of, version_of
from parley.store import scim
from parley.store.database import Database
from parley.store.scim import ScimResource

INDEXED = {"username": "name", "externalid": "external_id"}
ID_PREFIX = {USER: "scimuser", GROUP: "scimgroup"}


class AccountsStorage(AsyncScimStorage):
    def __init__(self, db: Database, provider: ScimProvider, provisioning: Provisioning) -> None:
        self._db = db
        self._provider = provider
        self._provisioning = provisioning

    async def get(
        self,
        resource_type: ResourceType,
        resource_id: str,
        *,
        response_parameters: ResponseParameters[Any] | None = None,
    ) -> Resource[Any]:
        async with self._db.transaction() as s:
            row = await self._row(s, resource_type, resource_id)
            return (await assembled(s, self._model(resource_type), [row]))[0]

    async def search(
        self,
        resource_types: list[ResourceType],
        search_request: SearchRequest[Any],
        *,
        position: Any = None,
    ) -> SearchPage:
        found: list[Resource[Any]] = []
        async with self._db.transaction() as s:
            named = {str(t.name): t for t in resource_types}
            for resource_type in named.values():
                found += await self._matching(s, resource_type, search_request.filter)
        return _page(search_request, found)

    async def create(self, resource_type: ResourceType, resource: Resource[Any]) -> Resource[Any]:
        kind = str(resource_type.name)
        row = ScimResource(id=new_id(ID_PREFIX[kind]), kind=kind, version=1, created_at=utcnow())
        pending = Pending()
        async with self._written() as s:
            await self._write(s, resource_type, row, resource, pending)
            await self._provisioning.written(s, row, resource, None, pending)
            result = (await assembled(s, self._model(resource_type), [row]))[0]
        await self._provisioning.settle(pending)
        return result

    async def update(
        self,
        resource_type: ResourceType,
        resource: Resource[Any],
        *,
        expected_version: str | None = None,
    ) -> Resource[Any]:
        pending = Pending()
        async with self._written() as s:
            row = await self._row(s, resource_type, cast(str, resource.id))
            _check_version(row, expected_version)
            previous = dict(row.body)
            await self._write(s, resource_type, row, resource, pending)
            row.version += 1
            await self._provisioning.written(s, row, resource, previous, pending)
            result = (await assembled(s, self._model(resource_type), [row]))[0]
        await self._provisioning.settle(pending)
        return result

    async def delete(
        self, resource_type: ResourceType, resource_id: str, *, expected_version: str | None = None
    ) -> None:
        pending = Pending()
        async with self._written() as s:
            row = await self._row(s, resource_type, resource_id)
            _check_version(row, expected_version)
            await self._provisioning.deleted(s, row, pending)
            await s.delete(row)
        await self._provisioning.settle(pending)

    @asynccontextmanager
    async def _written(self) -> AsyncIterator[AsyncSession]:
        """A write's transaction; a value another resource holds (a race the checks before
        the write lost) is the SCIM uniqueness error, not a 500."""
        try:
            async with self._db.transaction() as s:
                yield s
        except IntegrityError:
            raise UniquenessException(detail="a unique value is taken") from None

    async def _write(
        self,
        s: AsyncSession,
        resource_type: ResourceType,
        row: ScimResource,
        resource: Resource[Any],
        pending: Pending,
    ) -> None:
        body = body_of(resource)
        if resource_type.name == USER:
            name = str(body.get("userName", "")).lower()
            taken = [r for r in await scim.named(s, USER, name) if r.id != row.id]
            if taken:
                raise UniquenessException(detail=f"userName {body.get('userName')!r} is taken")
            row.name = name
        else:
            row.name = str(body.get("displayName", "")).lower()[:300]
        row.external_id = body.get("externalId")
        row.body = body
        row.updated_at = utcnow()
        s.add(row)
        await s.flush()
        if resource_type.name != USER:
            await self._set_members(s, row, resource, pending)

    async def _set_members(
        self, s: AsyncSession, row: ScimResource, resource: Resource[Any], pending: Pending
    ) -> None:
        wanted = [str(m.value) for m in getattr(resource, "members", None) or [] if m.value]
        for member_id in dict.fromkeys(wanted):
            member = await s.get(ScimResource, member_id)
            if member is None or member_id == row.id:
                raise InvalidValueException(detail=f"members: there is no resource {member_id!r}")
        touched = await scim.set_members(s, row.id, wanted)
        await self._provisioning.members_changed(s, touched, pending)

    async def _matching(
        self, s: AsyncSession, resource_type: ResourceType, found: ScimFilter[Any] | None
    ) -> list[Resource[Any]]:
        model = self._model(resource_type)
        rows = await _candidates(s, str(resource_type.name), found)
        resources = await assembled(s, model, rows)
        if found is None:
            return resources
        bound = ScimFilter[model](str(found))  # type: ignore[valid-type]
        return [r for r in resources if bound.match(r)]

    async def _row(self, s: AsyncSession, resource_type: ResourceType, rid: str) -> ScimResource:
        row = await scim.get(s, str(resource_type.name), rid)
        if row is None:
            raise NotFoundException(detail=f"{resource_type.name} {rid!r} not found")
        return row

    def _model(self, resource_type: ResourceType) -> type[Resource[Any]]:
        return cast(type[Resource[Any]], self._provider.model_for(resource_type))


async def _candidates(
    s: AsyncSession, kind: str, found: ScimFilter[Any] | None
) -> list[ScimResource]:
    """The rows a filter may match: by an indexed equality when it is one, else all."""
    node = found.ast if found is not None else None
    if (
        isinstance(node, Comparison)
        and node.op == CompareOperator.eq
        and isinstance(node.value, str)
        and kind == USER
    ):
        column = INDEXED.get(str(node.attr_path).lower().rsplit(":", 1)[-1])
        if column == "name":
            return await scim.named(s, kind, node.value.lower())
        if column == "external_id":
            return await scim.with_external_id(s, kind, node.value)
    return await scim.of_kind(s, kind)


def _page(search_request: SearchRequest[Any], found: list[Resource[Any]]) -> SearchPage:
    """Sorted by the asked attribute (missing values last), then id; the asked page."""
    descending = search_request.sort_order == SearchRequest.SortOrder.descending

    def key(resource: Resource[Any]) -> tuple[bool, Any, str]:
        value = search_request.sort_value(resource) if search_request.sort_by else None
        return value is None, value if value is not None else "", str(resource.id)

    ordered = sorted(found, key=key, reverse=descending and search_request.sort_by is not None)
    start = search_request.start_index_0 or 0
    stop = None if search_request.count is None else start + search_request.count
    return SearchPage(len(ordered), ordered[start:stop])


def _check_version(row: ScimResource, expected: str | None) -> None:
    if expected is not None and expected != version_of(row):
        raise PreconditionFailedException(detail="the resource changed since that version")
