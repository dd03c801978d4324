"""Several models at once: one Engine that hands each request to its model's engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from parley.engines.interface import (
    ChatMessage,
    Delta,
    Engine,
    EngineError,
    EngineState,
    GenerationRequest,
)


class UnknownModel(EngineError):
    code = "model_not_found"


class Catalog:
    def __init__(self, engines: dict[str, Engine]) -> None:
        self.engines = engines
        self._owners: dict[str, Engine] = {}

    def engine_for(self, model: str) -> Engine:
        try:
            return self.engines[model]
        except KeyError:
            raise UnknownModel(f"no engine serves the model {model!r}") from None

    async def start(self) -> None:
        await asyncio.gather(*(e.start() for e in self.engines.values()))

    def count_prompt_tokens(self, model: str, messages: list[ChatMessage]) -> int:
        return self.engine_for(model).count_prompt_tokens(model, messages)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        engine = self.engine_for(request.model)
        self._owners[request.request_id] = engine
        inner = engine.stream(request)
        try:
            async for delta in inner:
                yield delta
        finally:
            self._owners.pop(request.request_id, None)
            await inner.aclose()  # type: ignore[attr-defined]

    async def abort(self, request_id: str) -> None:
        engine = self._owners.get(request_id)
        if engine is not None:
            await engine.abort(request_id)

    def state(self) -> EngineState:
        """The worst of its engines': one model that cannot be served makes the process
        not ready (and a failed one makes it exit)."""
        states = [e.state() for e in self.engines.values()]
        for worst in (EngineState.FAILED, EngineState.RESTARTING):
            if worst in states:
                return worst
        return EngineState.READY

    async def close(self) -> None:
        await asyncio.gather(*(e.close() for e in self.engines.values()))
