"""The server's tools, by name: what a chat's run may call (``fetch_url``, ``search_chats``,
``read_message``, ``run_python`` where this machine can sandbox it). Built once per process
by the composition root; a tier names the ones its users may choose (``TierSettings.tools``),
a send the ones its answer may call."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from parley.archive.archiver import Archiver
from parley.errors import ConfigurationError
from parley.store.database import Database
from parley.store.pages import Cursors
from parley.tiers import TierSettings
from parley.tools.fetch import FetchUrl
from parley.tools.interface import Tool
from parley.tools.mcp import PREFIX, McpServers
from parley.tools.mcp_oauth import McpOAuth
from parley.tools.own_chats import ReadMessage, SearchChats
from parley.tools.sandbox import RunPython, unavailable
from parley.tools.settings import ToolSettings

log = logging.getLogger(__name__)


KNOWN = ("search_chats", "read_message", "fetch_url", "run_python")


class Toolbox:
    def __init__(
        self,
        settings: ToolSettings,
        db: Database,
        cursors: Cursors,
        archiver: Archiver,
        data_dir: Path,
        secret_key: str,
    ) -> None:
        self._fetch = FetchUrl(settings.fetch)
        tools: list[Tool] = [self._fetch, SearchChats(db, cursors), ReadMessage(db, archiver)]
        missing = unavailable(settings.sandbox, data_dir)
        if missing is None:
            tools.append(RunPython(settings.sandbox, data_dir))
        else:  # the other tools serve on; a chat that asks for it is told it is not here
            log.warning("run_python is left out: %s", missing)
        self._tools = {t.spec.function.name: t for t in tools}
        oauth = McpOAuth(settings.mcp_servers, db, secret_key)
        self.mcp = McpServers(settings.mcp_servers, oauth)

    def names(self) -> list[str]:
        return list(self._tools)

    async def chosen(self, names: Iterable[str], user_id: str) -> list[Tool]:
        """The tools of these names (unknown names left out), an ``mcp:<server>`` standing
        for that server's tools (none while it cannot be reached, or for a server that acts
        as the user, while this user has not connected it)."""
        asked = list(names)
        own = [self._tools[n] for n in asked if n in self._tools]
        return own + await self.mcp.tools(asked, user_id)

    def check_tiers(self, tiers: dict[str, TierSettings]) -> None:
        """Every tool a tier names is one of the server's (checked at start-up)."""
        known = [*KNOWN, *(f"{PREFIX}{n}" for n in self.mcp.names())]
        for name, tier in tiers.items():
            unknown = [t for t in tier.tools if t not in known]
            if unknown:
                raise ConfigurationError(
                    f"tier {name!r} names tools the server does not have: {', '.join(unknown)} "
                    f"(it has {', '.join(known)})"
                )

    async def close(self) -> None:
        await self._fetch.close()
