"""A real MCP server for the tests, written with the ``mcp`` SDK (``MCPServer``):

    python -m tests.tools.mcp_server PORT     # Streamable HTTP on 127.0.0.1:PORT/mcp
    python -m tests.tools.mcp_server stdio    # over its stdin and stdout

Its tools: ``get_weather`` (an answer), ``fail`` (an error result) and ``die`` (the process
exits in the middle of the call)."""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("weather")


@server.tool()
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny, 21 degrees"


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("the weather station is offline")


@server.tool()
async def die() -> str:
    """Exits in the middle of the call."""
    os._exit(3)


if __name__ == "__main__":
    where = sys.argv[1]
    if where == "stdio":
        asyncio.run(server.run_stdio_async())
    else:
        asyncio.run(server.run_streamable_http_async(port=int(where)))
