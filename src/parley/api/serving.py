"""The HTTP server of ``parley api`` and ``parley serve``: uvicorn's, which on SIGTERM (or
SIGINT) first tells the relay to drain (``Relay.drain``: each open ``/api`` stream ends
with a ``server_restarting`` hint, and its client resumes on another api process), then
stops taking connections and waits ``http.shutdown_grace_seconds`` for the rest."""

from __future__ import annotations

from types import FrameType

import uvicorn

from parley.runs.relay import Relay


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, relay: Relay) -> None:
        super().__init__(config)
        self._relay = relay

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._relay.drain()  # a flag the relays read at their next batch: safe in a handler
        super().handle_exit(sig, frame)
