"""Recently authenticated API keys, so that a busy program's every request is not a
database read (the first step of every run's path to its first token). Sessions are not
cached: they expire and idle out, and a browser sends far fewer requests.

An entry lives ``ttl`` seconds (``auth_cache_seconds``, default 5; 0 turns the cache off).
A revocation in this process (log out, log out everywhere, end a session, change the
password, revoke an API key) forgets the user's entries at once; one made in another
process (another api, the CLI's ``user set-tier``) takes effect here within ``ttl``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parley.accounts.principal import Principal

MAX_ENTRIES = 10_000


class CredentialCache:
    def __init__(self, ttl: float, max_entries: int = MAX_ENTRIES) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._entries: OrderedDict[str, tuple[float, Principal]] = OrderedDict()

    def get(self, token_hash: str) -> Principal | None:
        entry = self._entries.get(token_hash)
        if entry is None:
            return None
        expires, principal = entry
        if time.monotonic() >= expires:
            del self._entries[token_hash]
            return None
        return principal

    def put(self, token_hash: str, principal: Principal) -> None:
        if self._ttl <= 0:
            return
        self._entries[token_hash] = (time.monotonic() + self._ttl, principal)
        self._entries.move_to_end(token_hash)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def forget_user(self, user_id: str) -> None:
        for token_hash in [h for h, (_, p) in self._entries.items() if p.user_id == user_id]:
            del self._entries[token_hash]
