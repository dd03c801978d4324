"""What the engine is asked for a run: a program's own messages and parameters, or a chat's
history up to the run's user message (the prompt ``store/prompts.py`` counts ahead)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from parley.engines.interface import ChatMessage, GenerationRequest
from parley.runs.inputs import RunInput
from parley.store import run_records
from parley.store.schema import Run


async def generation_request(s: AsyncSession, run: Run) -> GenerationRequest:
    """What the engine is asked: a program's own messages and parameters, or the chat's
    history up to the run's user message."""
    if run.input is not None:
        return program_request(run)
    history = await run_records.history(s, run)
    return GenerationRequest(
        request_id=run.id,
        model=run.model,
        messages=[ChatMessage(m.role.value, m.content) for m in history],
        max_tokens=run.max_tokens,
        temperature=run.temperature,
        priority=run.priority,
        affinity_key=run.chat_id,  # every turn of a chat to the replica that holds its prefix
    )


def program_request(run: Run) -> GenerationRequest:
    """A program's run: its own messages and sampling parameters."""
    assert run.input is not None
    given = RunInput.from_json(run.input)
    return GenerationRequest(
        request_id=run.id,
        model=run.model,
        messages=given.messages,
        max_tokens=run.max_tokens,
        temperature=run.temperature,
        priority=run.priority,
        stop=given.stop,
        top_p=given.top_p if given.top_p is not None else 1.0,
        seed=given.seed,
        affinity_key=run.chat_id or given.affinity_key(run.user_id),
    )
