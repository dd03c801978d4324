"""MCP servers' tools, through the official ``mcp`` SDK: over Streamable HTTP or a local
command's stdio, as the operator configures them (``tools.mcp_servers``); a tier allows a
server's tools as ``mcp:<server>``.

A server's tool list is asked when a run first needs it and kept ``list_ttl_seconds``; a
server that cannot be reached leaves its tools out of that run (logged, and asked again the
next time) instead of failing the chat. Each of its tools is offered to the model as
``<server>__<tool>`` with the server's own description and input schema; a call opens a
session, calls, and closes it, within ``timeout_seconds``. What the server says is text
for the model (its text contents joined; an error result is an ``error`` outcome); a server
that dies mid-call is an ``error`` outcome too, and the run goes on.

A server configured with ``oauth`` acts as the user (``tools/mcp_oauth.py``): its tool
list is asked and kept per user, and every request carries that user's own token; a user
who has not connected it has none of its tools (they are told to connect it).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from parley.engines.tools import FunctionSpec, ToolSpec
from parley.tools.interface import Tool, ToolContext, ToolOutcome, ToolStatus
from parley.tools.mcp_oauth import McpOAuth, NotConnected, UserBearer
from parley.tools.settings import McpServerSettings

log = logging.getLogger(__name__)

PREFIX = "mcp:"
RESULT_CHARS = 20_000


def target(server: McpServerSettings, bearer: UserBearer | None = None) -> Any:
    """What the SDK's client connects to: the URL (with the user's token, for a server
    that acts as the user), or the command's stdio parameters."""
    if server.url is not None and bearer is not None:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        return streamable_http_client(server.url, http_client=create_mcp_http_client(auth=bearer))
    if server.url is not None:
        return server.url
    from mcp.client.stdio import StdioServerParameters

    assert server.command is not None
    return StdioServerParameters(command=server.command[0], args=server.command[1:], env=server.env)


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool of one MCP server, as a parley tool."""

    server: McpServerSettings
    name: str
    description: str | None
    schema: dict[str, Any]
    oauth: McpOAuth | None = None  # set: the server acts as the user

    @property
    def spec(self) -> ToolSpec:
        offered = re.sub(r"[^A-Za-z0-9_-]", "_", f"{self.server.name}__{self.name}")[:64]
        function = FunctionSpec(
            name=offered, description=self.description, parameters=self.schema or None
        )
        return ToolSpec(type="function", function=function)

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        from mcp.client.client import Client

        s = self.server
        bearer = None if self.oauth is None else UserBearer(self.oauth, context.user_id, s.name)
        try:
            async with asyncio.timeout(s.timeout_seconds):
                async with Client(target(s, bearer), read_timeout_seconds=s.timeout_seconds) as c:
                    result = await c.call_tool(self.name, arguments)
        except TimeoutError:
            return ToolOutcome(
                ToolStatus.TIMEOUT, f"{s.name} did not answer within {s.timeout_seconds:g} s"
            )
        except Exception as e:  # the server failed or went away mid-call
            if isinstance(_cause(e), NotConnected):  # the user's access ended
                return ToolOutcome.refused(str(_cause(e)))
            log.warning("MCP server %s failed on %s: %r", s.name, self.name, _cause(e))
            return ToolOutcome.error(f"the MCP server {s.name!r} failed during the call")
        text = "\n".join(getattr(part, "text", "") or "" for part in result.content)
        if not text and getattr(result, "structured_content", None) is not None:
            text = str(result.structured_content)
        status = ToolStatus.ERROR if result.is_error else ToolStatus.OK
        return ToolOutcome(status, text[:RESULT_CHARS])


class McpServers:
    """The configured servers and their tool lists (asked lazily, kept a while)."""

    def __init__(self, servers: list[McpServerSettings], oauth: McpOAuth) -> None:
        self._servers = {s.name: s for s in servers}
        self.oauth = oauth
        # by server, and by user for a server that acts as the user
        self._lists: dict[tuple[str, str], tuple[float, list[Tool]]] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def names(self) -> list[str]:
        return list(self._servers)

    async def tools(self, allowed: list[str], user_id: str) -> list[Tool]:
        """The tools of every ``mcp:<server>`` in ``allowed`` that answers now (for a
        server that acts as the user: if this user has connected it)."""
        names = [n[len(PREFIX) :] for n in allowed if n.startswith(PREFIX)]
        found = await asyncio.gather(
            *(self._listed(n, user_id) for n in names if n in self._servers)
        )
        return [t for tools in found for t in tools]

    async def _listed(self, name: str, user_id: str) -> list[Tool]:
        server = self._servers[name]
        key = (name, user_id if self.oauth.needs_user(name) else "")
        async with self._locks.setdefault(key, asyncio.Lock()):
            cached = self._lists.get(key)
            if cached is not None and time.monotonic() - cached[0] < server.list_ttl_seconds:
                return cached[1]
            try:
                tools = await self._ask(server, user_id)
            except Exception as e:  # down: its tools are left out of this run, asked again next
                log.warning("MCP server %s: its tools are left out: %r", name, _cause(e))
                self._lists.pop(key, None)
                return []
            self._lists[key] = (time.monotonic(), tools)
            return tools

    async def _ask(self, server: McpServerSettings, user_id: str) -> list[Tool]:
        from mcp.client.client import Client

        oauth = self.oauth if self.oauth.needs_user(server.name) else None
        bearer = None if oauth is None else UserBearer(oauth, user_id, server.name)
        async with asyncio.timeout(server.timeout_seconds):
            async with Client(
                target(server, bearer), read_timeout_seconds=server.timeout_seconds
            ) as c:
                listed = await c.list_tools()
        return [
            McpTool(server, t.name, t.description, dict(t.input_schema or {}), oauth)
            for t in listed.tools
        ]

    def forget_user(self, server: str, user_id: str) -> None:
        """A user's tool list of a server they connected or disconnected, asked again."""
        self._lists.pop((server, user_id), None)


def _cause(e: BaseException) -> BaseException:
    """The first error inside an exception group (the SDK's task groups wrap them)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e
