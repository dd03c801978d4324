"""The audit log's hash chain: each record's hash covers its own fields and the hash before
it, so a record edited, deleted or moved breaks the chain where it was (``verify``).

A record's hash is an HMAC-SHA-256, keyed by a key derived from ``secret_key`` (which the
database does not hold), over the previous hash and the record's canonical JSON (sorted
keys, no spaces, times in ISO 8601 UTC): someone who can write the database but does not
have the key cannot rewrite the chain to hide an edit. The first record chains from
``GENESIS``; after records are pruned for age, from the hash of the last one pruned (the
head keeps it).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

GENESIS = "0" * 64


@dataclass(frozen=True, slots=True)
class Entry:
    """One record as the chain sees it."""

    seq: int
    at: datetime
    action: str
    actor_id: str | None
    actor: str
    target_type: str | None
    target_id: str | None
    detail: dict[str, Any]
    address: str | None
    user_agent: str | None
    request_id: str | None

    def canonical(self) -> str:
        fields = {
            "seq": self.seq,
            "at": self.at.isoformat(timespec="microseconds"),
            "action": self.action,
            "actor_id": self.actor_id,
            "actor": self.actor,
            "target_type": self.target_type,
            "target_id": self.target_id,
            "detail": self.detail,
            "address": self.address,
            "user_agent": self.user_agent,
            "request_id": self.request_id,
        }
        return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Chain:
    """The chain's keyed link: a record's hash from the one before it."""

    def __init__(self, secret_key: str) -> None:
        self._key = hashlib.sha256(f"parley:audit-chain:{secret_key}".encode()).digest()

    def link(self, previous: str, entry: Entry) -> str:
        message = f"{previous}\n{entry.canonical()}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Break:
    """Where the chain does not hold, and why."""

    seq: int
    why: str


def verify(
    chain: Chain,
    stored: Iterable[tuple[Entry, str, str]],
    *,
    anchor_seq: int,
    anchor_hash: str,
    head_seq: int,
    head_hash: str,
) -> list[Break]:
    """Every break in the chain of ``stored`` (entry, its prev_hash, its hash) read in
    ``seq`` order from just after the anchor; none: it holds, from the anchor to the head."""
    breaks: list[Break] = []
    expected_seq, previous = anchor_seq + 1, anchor_hash
    for entry, prev_hash, stored_hash in stored:
        if entry.seq > expected_seq:
            breaks.append(
                Break(expected_seq, f"records {expected_seq}..{entry.seq - 1} are missing")
            )
        elif entry.seq < expected_seq:
            breaks.append(Break(entry.seq, f"record {entry.seq} is out of order"))
        if prev_hash != previous:
            breaks.append(Break(entry.seq, "it does not follow the record before it"))
        if not hmac.compare_digest(chain.link(prev_hash, entry), stored_hash):
            breaks.append(Break(entry.seq, "its contents were changed after it was written"))
        expected_seq, previous = entry.seq + 1, stored_hash
    if expected_seq - 1 != head_seq or previous != head_hash:
        breaks.append(
            Break(head_seq, f"the log ends at {expected_seq - 1}, its head at {head_seq}")
        )
    return breaks
