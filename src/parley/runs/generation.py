"""What the engine is asked for a run, prepared once the run is claimed: a program's own
messages and parameters, a chat's prompt assembled under its budget (``context.prompts``,
its composition stored on the run), a fold of the chat's summary asked for after it (and a
completed fold's new prefix warmed before it lands), or, with context management off, the
chat's whole history.

The api counted the same prompt ahead (``ChatContext`` over the same rows) for the run's
budget reservation; settlement charges what was really sent.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace

import anyio
from sqlalchemy.ext.asyncio import AsyncSession

from parley.bus.interface import RunInputs
from parley.context.assembly import Assembled, ContextTooLong, NewMessage
from parley.context.prompts import ChatContext
from parley.context.summaries import Summaries
from parley.domain import BACKGROUND_PRIORITY, RunSource, RunStatus, new_id
from parley.engines.interface import (
    ChatMessage,
    ContextLengthExceeded,
    Engine,
    EngineError,
    GenerationRequest,
)
from parley.runs.inputs import RunInput
from parley.store import run_records, summaries
from parley.store.database import Database
from parley.store.parts import MessageParts, prompt_message
from parley.store.prompts import ChatRef, ChatSummary
from parley.store.schema import Message, Run

log = logging.getLogger(__name__)

# a fold's new prefix not warmed within this long lands anyway (its turns prefill it)
WARM_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class Prompt:
    request: GenerationRequest
    tokens: int  # as the model counts them
    assembled: Assembled | None = None  # a chat's, assembled under its budget
    # the run's message cannot fit its budget (limits changed since the api checked), or a
    # temporary chat's input is gone: the run fails with this, the engine never asked
    refusal: EngineError | None = None
    # a continued answer's text so far: the stream and the answer begin with it
    prefix: str = ""


class InputExpired(EngineError):
    """A temporary chat's conversation is no longer on the bus (the run waited past
    ``runs.temporary_input_ttl_seconds``): nothing to answer."""

    code = "input_expired"


class Prompting:
    """The worker's side of a run's prompt."""

    def __init__(
        self,
        db: Database,
        engine: Engine,
        context: ChatContext,
        summaries: Summaries,
        inputs: RunInputs | None = None,
    ) -> None:
        """``inputs``: where temporary chats' conversations are kept (the bus)."""
        self._db = db
        self._engine = engine
        self._context = context
        self._summaries = summaries
        self._inputs = inputs

    async def prepare(self, run: Run) -> Prompt:
        """The run's prompt, its length and composition stored on the run, and the chat's
        fold asked for if due."""
        if run.ephemeral:
            return await self._ephemeral(run)
        if run.input is not None and run.prompt_tokens is not None:  # counted at birth
            return Prompt(program_request(run), run.prompt_tokens)
        try:
            if run.input is None and self._context.enabled:
                prompt = await self._assembled(run)  # (its reads in transactions of its own)
            else:
                async with self._db.transaction() as s:
                    prompt = await self.prompt_of(s, run)
            prompt = await self._continued(run, prompt)
        except ContextTooLong as e:
            return Prompt(chat_request(run, []), 0, refusal=ContextLengthExceeded(e.message))
        parts = prompt.assembled.composition.to_json() if prompt.assembled else None
        async with self._db.transaction() as s:
            await run_records.set_prompt_tokens(
                s, run, prompt.tokens, json.dumps(parts) if parts else None
            )
        return prompt

    async def _continued(self, run: Run, prompt: Prompt) -> Prompt:
        """A continued answer's prompt: the answer it continues last, for the model to go
        on from (``GenerationRequest.continue_final``), counted in; others as they are."""
        if run.continues_id is None:
            return prompt
        async with self._db.reads() as s:
            answer = await s.get(Message, run.continues_id)
        if answer is None:  # deleted since: answered afresh
            return prompt
        messages = [*prompt.request.messages, ChatMessage("assistant", answer.content)]
        request = replace(prompt.request, messages=messages, continue_final=True)
        tokens = self._engine.count_prompt_tokens(run.model, messages)
        return replace(prompt, request=request, tokens=tokens, prefix=answer.content)

    async def _ephemeral(self, run: Run) -> Prompt:
        """A temporary chat's prompt: the system prompt and the user's instructions, then
        its conversation from the bus (never stored); its length stored (no composition)."""
        text = None if self._inputs is None else await self._inputs.run_input(run.id)
        if text is None:
            gone = InputExpired("this temporary chat's conversation is no longer kept")
            return Prompt(chat_request(run, []), 0, refusal=gone)
        request = program_request(run, text)
        opening = await self._context.opening(self._db, run.user_id, run.model)
        request = replace(request, messages=[*opening, *request.messages])
        tokens = self._engine.count_prompt_tokens(run.model, request.messages)
        async with self._db.transaction() as s:
            await run_records.set_prompt_tokens(s, run, tokens, None)
        return Prompt(request, tokens)

    def ended(self, run: Run, prompt: Prompt, ended: Run | None) -> None:
        """After a run's end: the fold its prompt found due is asked for now (not beside the
        run: on one engine a fold's prefill would slow the user's answer); a fold that
        just completed has the prefix it makes warmed, then lands; a temporary chat's
        conversation is forgotten (not after a lost lease: the next attempt reads it)."""
        if run.ephemeral and ended is not None and self._inputs is not None:
            self._summaries.later(self._inputs.forget_input(run.id))
        if prompt.assembled is not None and prompt.assembled.fold is not None:
            self._summaries.fold_soon(run, prompt.assembled.fold)
        completed = ended is not None and ended.status is RunStatus.COMPLETED
        if completed and ended is not None and ended.source is RunSource.SUMMARY:
            self._summaries.later(self._land(ended))

    async def _land(self, fold: Run) -> None:
        """The chat's prompt prefix as its next turns will send it with the new summary
        (the summary, the turns since) prefilled at the lowest priority, then the summary
        lands: until then the turns keep the old prefix, which the engine's prefix cache
        holds, so no turn waits for the new one to be prefilled. A warm-up that fails or
        takes too long only delays the landing."""
        try:
            with anyio.fail_after(WARM_TIMEOUT_SECONDS):
                await self._warm(fold)
        except Exception:
            log.warning("chat %s: warming the new summary's prefix failed", fold.chat_id)
        async with self._db.transaction() as s:
            await summaries.land(s, fold)

    async def _warm(self, fold: Run) -> None:
        assert fold.chat_id is not None and fold.summary_through_seq is not None
        new = NewMessage("", fold.model, fold.tier, self._context.default_output(fold.tier))
        chat = ChatRef(fold.user_id, fold.chat_id)
        pending = ChatSummary(
            summaries.summary_text(fold.output), fold.summary_through_seq, fold.id
        )
        assembled = await self._context.assemble(self._db, chat, new, pending)
        request = GenerationRequest(
            request_id=new_id("warm"),
            model=fold.model,
            messages=assembled.messages[:-1],  # the prefix, without the empty new message
            max_tokens=1,
            priority=BACKGROUND_PRIORITY,
            affinity_key=fold.chat_id,
        )
        async for _ in self._engine.stream(request):
            pass

    async def prompt_of(self, s: AsyncSession, run: Run) -> Prompt:
        """A program's (or fold's) prompt, or a chat's whole history (context management
        off), read in ``s``."""
        if run.input is not None:
            request = program_request(run)
        else:
            history = await run_records.history(s, run)
            asked = [
                prompt_message(m.role.value, m.content, MessageParts.from_json(m.parts))
                for m in history
            ]
            request = chat_request(run, asked)
        return Prompt(request, self._engine.count_prompt_tokens(run.model, request.messages))

    async def _assembled(self, run: Run) -> Prompt:
        assert run.chat_id is not None and run.user_message_id is not None
        async with self._db.reads() as s:
            message = await s.get(Message, run.user_message_id)
        assert message is not None
        new = NewMessage(message.content, run.model, run.tier, run.max_tokens, message.seq)
        chat = ChatRef(run.user_id, run.chat_id)
        assembled = await self._context.assemble(self._db, chat, new)
        request = chat_request(run, assembled.messages)
        return Prompt(request, assembled.composition.total_tokens, assembled)


def chat_request(run: Run, messages: list[ChatMessage]) -> GenerationRequest:
    return GenerationRequest(
        request_id=run.id,
        model=run.model,
        messages=messages,
        max_tokens=run.max_tokens,
        sampling=run.sampling,
        priority=run.priority,
        affinity_key=run.chat_id,  # every turn of a chat to the replica that holds its prefix
    )


def program_request(run: Run, text: str | None = None) -> GenerationRequest:
    """A program's run (or a fold of a chat's summary): its own messages and parameters
    (``text``: its input, when the run does not hold it: a temporary chat's)."""
    text = run.input if text is None else text
    assert text is not None
    given = RunInput.from_json(text)
    return GenerationRequest(
        request_id=run.id,
        model=run.model,
        messages=given.messages,
        max_tokens=run.max_tokens,
        sampling=run.sampling,
        priority=run.priority,
        affinity_key=run.chat_id or given.affinity_key(run.user_id),
        output=given.output,
    )
