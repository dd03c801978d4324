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
from parley.tools.settings import McpServerSettings

log = logging.getLogger(__name__)

PREFIX = "mcp:"
RESULT_CHARS = 20_000


def target(server: McpServerSettings) -> Any:
    """What the SDK's client connects to: the URL, or the command's stdio parameters."""
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
        try:
            async with asyncio.timeout(s.timeout_seconds):
                async with Client(target(s), read_timeout_seconds=s.timeout_seconds) as client:
                    result = await client.call_tool(self.name, arguments)
        except TimeoutError:
            return ToolOutcome(
                ToolStatus.TIMEOUT, f"{s.name} did not answer within {s.timeout_seconds:g} s"
            )
        except Exception as e:  # the server failed or went away mid-call
            log.warning("MCP server %s failed on %s: %r", s.name, self.name, e)
            return ToolOutcome.error(f"the MCP server {s.name!r} failed during the call")
        text = "\n".join(getattr(part, "text", "") or "" for part in result.content)
        if not text and getattr(result, "structured_content", None) is not None:
            text = str(result.structured_content)
        status = ToolStatus.ERROR if result.is_error else ToolStatus.OK
        return ToolOutcome(status, text[:RESULT_CHARS])


class McpServers:
    """The configured servers and their tool lists (asked lazily, kept a while)."""

    def __init__(self, servers: list[McpServerSettings]) -> None:
        self._servers = {s.name: s for s in servers}
        self._lists: dict[str, tuple[float, list[Tool]]] = {}
        self._locks: dict[str, asyncio.Lock] = {name: asyncio.Lock() for name in self._servers}

    def names(self) -> list[str]:
        return list(self._servers)

    async def tools(self, allowed: list[str]) -> list[Tool]:
        """The tools of every ``mcp:<server>`` in ``allowed`` that answers now."""
        names = [n[len(PREFIX) :] for n in allowed if n.startswith(PREFIX)]
        found = await asyncio.gather(*(self._listed(n) for n in names if n in self._servers))
        return [t for tools in found for t in tools]

    async def _listed(self, name: str) -> list[Tool]:
        server = self._servers[name]
        async with self._locks[name]:
            cached = self._lists.get(name)
            if cached is not None and time.monotonic() - cached[0] < server.list_ttl_seconds:
                return cached[1]
            try:
                tools = await self._ask(server)
            except Exception as e:  # down: its tools are left out of this run, asked again next
                log.warning("MCP server %s is not answering; its tools are left out: %r", name, e)
                self._lists.pop(name, None)
                return []
            self._lists[name] = (time.monotonic(), tools)
            return tools

    @staticmethod
    async def _ask(server: McpServerSettings) -> list[Tool]:
        from mcp.client.client import Client

        async with asyncio.timeout(server.timeout_seconds):
            async with Client(target(server), read_timeout_seconds=server.timeout_seconds) as c:
                listed = await c.list_tools()
        return [
            McpTool(server, t.name, t.description, dict(t.input_schema or {})) for t in listed.tools
        ]
