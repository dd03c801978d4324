"""Calls that wait for the user's yes: the operator marks tools (``tools.confirm``; an
``mcp:<server>`` stands for all its tools); before such a call runs, a ``tool_confirm``
event asks the user (the web UI shows Allow and Deny), and the run waits — at most
``confirm_seconds``, and never past a stop — for the ``tool_answer`` that
``POST /api/runs/{run_id}/tool-calls/{call_id}`` appends to the same stream. A call not
allowed (declined, or no answer in time) is not made: its outcome says why.

The answer travels on the run's own stream (unfenced appends are always taken), so it
needs nothing of the bus but what every stream has, on both buses, and a client that
resumes sees the question and the answer as they happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from parley.bus.interface import Bus, EventKind
from parley.engines.tools import ToolCall
from parley.runs.events import ToolAnswerEvent, ToolConfirmEvent, decode, encode
from parley.runs.progress import Progress
from parley.tools.interface import ToolOutcome
from parley.tools.settings import ToolSettings

Append = Callable[[list[Any], Progress], Awaitable[bool]]


class Confirmations:
    def __init__(self, bus: Bus, settings: ToolSettings) -> None:
        self._bus = bus
        self._marked = set(settings.confirm)
        self._seconds = settings.confirm_seconds

    def needs(self, call: ToolCall) -> bool:
        server = call.name.split("__", 1)[0] if "__" in call.name else None
        return call.name in self._marked or (server is not None and f"mcp:{server}" in self._marked)

    async def ask(
        self, run_id: str, calls: list[ToolCall], progress: Progress, append: Append
    ) -> dict[str, ToolOutcome] | None:
        """The outcomes of the asked calls the user did not allow; None if stopped."""
        asked = [c for c in calls if self.needs(c)]
        if not asked:
            return {}
        questions = [
            encode(
                ToolConfirmEvent(id=c.id, name=c.name, arguments=c.arguments, seconds=self._seconds)
            )
            for c in asked
        ]
        if not await append(questions, progress):
            return None
        answers = await self._answers(run_id, {c.id for c in asked}, progress)
        if answers is None:
            return None
        refused = {}
        for call in asked:
            if call.id not in answers:
                refused[call.id] = ToolOutcome.refused(
                    f"the user did not answer within {self._seconds:g} s: the call was not made"
                )
            elif not answers[call.id]:
                refused[call.id] = ToolOutcome.refused("the user did not allow this call")
        return refused

    async def _answers(
        self, run_id: str, ids: set[str], progress: Progress
    ) -> dict[str, bool] | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._seconds
        answers: dict[str, bool] = {}
        after: str | None = None
        while ids - answers.keys():
            left = deadline - loop.time()
            if left <= 0 or progress.stopped:
                break
            for entry in await self._bus.read(run_id, after, timeout=min(left, 0.5)):
                after = entry.id
                if entry.event.kind is EventKind.TOOL_ANSWER:
                    answer = decode(entry.event)
                    if isinstance(answer, ToolAnswerEvent) and answer.id in ids:
                        answers.setdefault(answer.id, answer.approve)
        return None if progress.stopped else answers
