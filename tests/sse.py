"""A small SSE client for tests: parse frames, follow a run's stream, resume."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Event:
    id: str | None
    event: str
    data: dict[str, Any]


async def events(response: httpx.Response) -> AsyncIterator[Event]:
    """Parse an SSE response body into events (comments are skipped)."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "data" in fields:
                yield Event(
                    fields.get("id"), fields.get("event", "message"), json.loads(fields["data"])
                )
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields[name] = value[1:] if value.startswith(" ") else value


async def collect(response: httpx.Response) -> list[Event]:
    return [e async for e in events(response)]


def text_of(evs: list[Event]) -> str:
    out = ""
    for e in evs:
        if e.event == "delta":
            out = e.data["text"] if e.data.get("replace") else out + e.data["text"]
    return out
