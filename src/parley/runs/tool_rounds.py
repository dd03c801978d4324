"""A chat's answer that calls the server's tools, inside its one run: the model is offered
the run's tools; when it answers with calls, they run (at once, side by side), each
result is a ``tool_result`` event of the stream and a step of the answer's parts, and the
model is asked again with the calls and results after the conversation — until it answers
without calling, or the tier's ``max_tool_rounds`` or ``max_tool_seconds`` is reached (the
last step is then asked with the tools offered but not callable: ``tool_choice: none``).

The run stays the unit: one admission and reservation (settled with every step's tokens),
one stop (the worker's cancel watcher sets ``Progress.stopping``: a running tool is
cancelled at once), the fence on every append, and the sweeper as for any run (a run that
streamed a result is never re-run, so no call runs twice).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from parley.attachments.answer_files import AnswerFiles
from parley.domain import FinishReason
from parley.engines.interface import ChatMessage, GenerationRequest
from parley.engines.tools import ToolCall, ToolUse
from parley.qos.settings import QosSettings
from parley.runs.events import ToolFileRef, ToolResultEvent, encode
from parley.runs.progress import Progress
from parley.runs.tool_confirmations import Confirmations
from parley.safety.moderator import Moderator
from parley.store.parts import ToolStep
from parley.store.schema import Attachment, Run
from parley.tools.interface import Tool, ToolContext, ToolOutcome, ToolStatus
from parley.tools.toolbox import Toolbox

log = logging.getLogger(__name__)

RESULT_CHARS = 8_000  # of one result, what the model is given and the answer keeps
PREVIEW_CHARS = 300  # of one result, what its event carries

Stream = Callable[[GenerationRequest, Progress], Awaitable[None]]  # one model step
Append = Callable[[list[Any], Progress], Awaitable[bool]]  # events, under the fence


class ToolRounds:
    def __init__(
        self,
        toolbox: Toolbox,
        qos: QosSettings,
        moderator: Moderator | None = None,
        confirming: Confirmations | None = None,
        files: AnswerFiles | None = None,
    ) -> None:
        self.toolbox = toolbox
        self._qos = qos
        self._moderator = moderator
        self._confirming = confirming
        self._files = files

    async def tools_of(self, run: Run) -> list[Tool]:
        """The tools the run may call: those its send chose that its tier allows now."""
        if not run.tools:
            return []
        allowed = self._qos.tier(run.tier).tools
        names = json.loads(run.tools)["names"]
        return await self.toolbox.chosen((n for n in names if n in allowed), run.user_id)

    async def answer(
        self,
        run: Run,
        request: GenerationRequest,
        progress: Progress,
        tools: list[Tool],
        stream: Stream,
        append: Append,
    ) -> None:
        tier = self._qos.tier(run.tier)
        specs = tuple(t.spec for t in tools)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + tier.max_tool_seconds
        messages = list(request.messages)
        first = json.loads(run.tools or "{}").get("first", "auto")
        for step in range(tier.max_tool_rounds + 1):
            last = step == tier.max_tool_rounds or loop.time() >= deadline
            choice = "none" if last else (first if step == 0 else "auto")
            offered = ToolUse(tools=specs, choice=choice)
            output = request.output.model_copy(update={"tools": offered})
            await stream(replace(request, messages=messages, output=output), progress)
            calls = progress.round_calls()
            if progress.stopped or progress.finish is not FinishReason.TOOL_CALLS or not calls:
                return
            allowed = await self._allowed(run, calls, progress, append)
            if allowed is None:
                return
            outcomes = await self._run_calls(run, calls, tools, deadline, progress, allowed)
            if outcomes is None:  # stopped while its tools ran
                return
            if not await self._report(run, outcomes, progress, append):
                return
            messages += _turn(progress.round_text(), outcomes)
            progress.next_round(
                [ToolStep(c, o.status.value, o.content[:RESULT_CHARS]) for c, o in outcomes]
            )

    async def _report(
        self,
        run: Run,
        outcomes: list[tuple[ToolCall, ToolOutcome]],
        progress: Progress,
        append: Append,
    ) -> bool:
        """The round's results on the stream, the files its tools made kept as attachments
        of the answer first (and dropped again if this worker no longer holds the run)."""
        kept: dict[str, list[Attachment]] = {}
        for call, outcome in outcomes:
            if outcome.files and self._files is not None:
                kept[call.id] = await self._files.keep(run, list(outcome.files))
        events = [_event(call, outcome, kept.get(call.id, [])) for call, outcome in outcomes]
        if await append(events, progress):
            return True
        if self._files is not None:
            await self._files.drop([row for rows in kept.values() for row in rows])
        return False

    async def _run_calls(
        self,
        run: Run,
        calls: list[ToolCall],
        tools: list[Tool],
        deadline: float,
        progress: Progress,
        allowed: dict[str, ToolOutcome],
    ) -> list[tuple[ToolCall, ToolOutcome]] | None:
        """Every call's outcome (side by side, within the deadline; a call the user did not
        allow has its outcome in ``allowed`` already); None if the run was stopped meanwhile
        (the calls cancelled)."""
        by_name = {t.spec.function.name: t for t in tools}
        context = ToolContext(run.user_id, run.chat_id, run.id, run.user_message_id)
        remaining = deadline - asyncio.get_running_loop().time()
        work: asyncio.Future[Any] = asyncio.ensure_future(
            asyncio.gather(
                *(
                    _refused(allowed[c.id])
                    if c.id in allowed
                    else _call(by_name, c, context, remaining)
                    for c in calls
                )
            )
        )
        stopping: asyncio.Future[Any] = asyncio.ensure_future(progress.stopping.wait())
        try:
            await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
        if work.cancelled() or progress.stopped:
            return None
        checked = [await self._checked(run, outcome) for outcome in work.result()]
        return list(zip(calls, checked, strict=True))

    async def _allowed(
        self, run: Run, calls: list[ToolCall], progress: Progress, append: Append
    ) -> dict[str, ToolOutcome] | None:
        """The outcomes of the calls the user was asked about and did not allow (none asked
        when no tool needs it); None if the run was stopped while it waited."""
        if self._confirming is None:
            return {}
        return await self._confirming.ask(run.id, calls, progress, append)

    async def _checked(self, run: Run, outcome: ToolOutcome) -> ToolOutcome:
        """A result is untrusted input: the tier's input classifiers (prompt-injection
        heuristics among them) judge it before the model reads it; one they refuse is
        withheld, and the model and the user are told why."""
        if self._moderator is None or outcome.status is not ToolStatus.OK:
            return outcome
        ruling = await self._moderator.check_input(run.tier, outcome.content)
        if not ruling.blocked:
            return outcome
        why = ruling.reason if ruling.unavailable else ruling.category
        return ToolOutcome.refused(f"the tool's result was withheld by the content policy ({why})")


async def _refused(outcome: ToolOutcome) -> ToolOutcome:
    return outcome


async def _call(
    by_name: dict[str, Tool], call: ToolCall, context: ToolContext, seconds: float
) -> ToolOutcome:
    tool = by_name.get(call.name)
    if tool is None:
        return ToolOutcome.refused(f"there is no tool {call.name!r} here")
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return ToolOutcome.refused("the arguments are not JSON")
    if not isinstance(arguments, dict):
        return ToolOutcome.refused("the arguments are not a JSON object")
    if seconds <= 0:
        return ToolOutcome(ToolStatus.TIMEOUT, "no time left for tools in this answer")
    try:
        async with asyncio.timeout(seconds):
            return await tool.call(arguments, context)
    except TimeoutError:
        return ToolOutcome(ToolStatus.TIMEOUT, f"{call.name} took longer than {seconds:.0f} s")
    except Exception as e:  # a tool's own failure: an outcome, and the answer goes on
        log.exception("tool %s failed on run %s", call.name, context.run_id)
        return ToolOutcome.error(f"{call.name} failed: {type(e).__name__}")


def _event(call: ToolCall, outcome: ToolOutcome, files: list[Attachment]) -> Any:
    preview = outcome.content[:PREVIEW_CHARS]
    refs = [ToolFileRef(id=f.id, name=f.name, media_type=f.media_type, size=f.size) for f in files]
    return encode(
        ToolResultEvent(
            id=call.id, name=call.name, status=outcome.status, preview=preview, files=refs
        )
    )


def _turn(text: str, outcomes: list[tuple[ToolCall, ToolOutcome]]) -> list[ChatMessage]:
    """The step as the next one's prompt carries it: the model's text and calls, then each
    call's result."""
    calls = tuple(call for call, _ in outcomes)
    results = [ChatMessage("tool", o.content[:RESULT_CHARS], (), c.id) for c, o in outcomes]
    return [ChatMessage("assistant", text, calls), *results]
