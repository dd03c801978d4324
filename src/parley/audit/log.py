"""The audit log as the rest of parley uses it: ``record`` an event in the caller's
transaction (a change and its record commit together) or in one of its own (a failed
sign-in changes nothing else), ``verify`` the chain, ``export`` it as JSON lines, and
``prune`` what is older than the retention."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from parley.audit.actions import AuditEvent, Where
from parley.audit.chain import Break, Chain, verify
from parley.audit.context import here
from parley.audit.settings import AuditSettings
from parley.domain import utcnow
from parley.outages import log_failure
from parley.store import audit
from parley.store.audit import AuditRecord
from parley.store.database import Database

log = logging.getLogger(__name__)


class AuditLog:
    def __init__(self, db: Database, settings: AuditSettings, secret_key: str) -> None:
        self._db = db
        self._settings = settings
        self._chain = Chain(secret_key)

    async def record_in(self, s: AsyncSession, event: AuditEvent) -> None:
        """In the caller's transaction: the change and its record commit together."""
        await audit.append(s, _placed(event), self._chain)

    async def record(self, event: AuditEvent) -> None:
        async with self._db.transaction() as s:
            await audit.append(s, _placed(event), self._chain)

    async def verify(self) -> list[Break]:
        async with self._db.transaction() as s:
            head = await audit.head(s)
            rows = [
                (audit.entry_of(r), r.prev_hash, r.hash)
                async for r in audit.in_order(s, head.anchor_seq)
            ]
        return verify(
            self._chain,
            rows,
            anchor_seq=head.anchor_seq,
            anchor_hash=head.anchor_hash,
            head_seq=head.seq,
            head_hash=head.hash,
        )

    async def count(self) -> int:
        async with self._db.transaction() as s:
            head = await audit.head(s)
        return head.seq - head.anchor_seq

    async def export(self) -> AsyncIterator[str]:
        """Every record, oldest first, one JSON object a line."""
        async with self._db.transaction() as s:
            async for row in audit.in_order(s):
                yield json.dumps(wire(row), sort_keys=True) + "\n"

    async def prune_forever(self) -> None:
        """Every ``prune_interval_seconds``: what is older than the retention, deleted."""
        while True:
            try:
                pruned = await self.prune()
            except Exception as e:  # an outage: tried again next time
                log_failure(log, e, "audit log pruning")
            else:
                if pruned:
                    log.info("audit log: %d records past the retention deleted", pruned)
            await asyncio.sleep(self._settings.prune_interval_seconds)

    async def prune(self) -> int:
        cutoff = utcnow() - timedelta(days=self._settings.retention_days)
        async with self._db.transaction() as s:
            return await audit.prune(s, cutoff)


def _placed(event: AuditEvent) -> AuditEvent:
    """The event with the request's address, agent and id, unless it says where."""
    return event if event.where != Where() else replace(event, where=here())


def wire(row: AuditRecord) -> dict[str, Any]:
    """A record as the API and the export show it."""
    return {
        "seq": row.seq,
        "at": row.at.isoformat(),
        "action": row.action,
        "actor_id": row.actor_id,
        "actor": row.actor,
        "target_type": row.target_type,
        "target_id": row.target_id,
        "detail": json.loads(row.detail),
        "address": row.address,
        "user_agent": row.user_agent,
        "request_id": row.request_id,
        "prev_hash": row.prev_hash,
        "hash": row.hash,
    }
