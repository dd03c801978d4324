"""A chat's prompt as it is sent: read, counted and assembled under the run's budget.

One ``ChatContext`` per process serves both ends of a run: the api counts the prompt a new
message will be sent with (its budget reservation) and refuses a message that cannot fit
before admission; the worker assembles the very prompt it sends and records its composition
on the run. Both read the same rows (``store/prompts.py``) and assemble them the same way
(``context.assembly``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Protocol

import anyio

from parley.attachments.settings import AttachmentSettings
from parley.context.assembly import (
    MESSAGE_OVERHEAD,
    PROMPT_OVERHEAD,
    Assembled,
    Fixed,
    Instructions,
    Limits,
    NewMessage,
    Turn,
    compose,
    pick_snippets,
    refuse_too_long,
    system_text,
    window_start,
)
from parley.context.attachments import attached, files_text
from parley.context.relevance import bears_on, excerpt, stems
from parley.context.settings import ContextSettings
from parley.domain import MessageRole
from parley.engines.interface import ChatMessage
from parley.engines.settings import EngineSettings
from parley.qos.prompt_counter import PromptCounter
from parley.qos.settings import QosSettings
from parley.store import prompts
from parley.store.database import Database
from parley.store.parts import counted_text
from parley.store.prompts import ChatRef, ChatSummary, Row
from parley.store.schema import Message

log = logging.getLogger(__name__)

# the chat's unsummarized messages read, newest first; older ones are reached through the
# summary and retrieval
UNSUMMARIZED_LIMIT = 400
# a summary's heading in the system message, in tokens (``assembly.system_text``)
SUMMARY_HEADING = 16
# exact counts over budget: the window shrinks and the prompt is counted again, this often
FIT_ATTEMPTS = 4


class Retrieval(Protocol):
    """Opens its own short transactions (``context.retrieval.Retriever``)."""

    async def retrieve(
        self,
        db: Database,
        *,
        user_id: str,
        chat_id: str,
        query: str,
        before_seq: int,
        limit: int,
    ) -> list[Message]: ...


FILE_ROLES = (MessageRole.USER.value, MessageRole.ASSISTANT.value)


@dataclass(frozen=True, slots=True)
class _Draft:
    chat: ChatRef
    model: str
    fixed: Fixed
    history: list[Turn]
    new: Turn
    system: tuple[int, int]
    limits: Limits
    question: str = ""  # the new message's own text (``new`` holds its files too)


class ChatContext:
    def __init__(
        self,
        settings: ContextSettings,
        retrieval: Retrieval | None = None,
        *,
        qos: QosSettings,
        engines: EngineSettings,
        attachments: AttachmentSettings,
        counter: PromptCounter | None = None,
    ) -> None:
        """``counter``: one whose tokenizers this process has loaded (its engine's); else
        the models' tokenizers are loaded at the first need."""
        self._settings = settings
        self._qos = qos
        self._engines = engines
        self._attachments = attachments
        self._retrieval = retrieval
        self._counter = counter

    async def close(self) -> None:
        close = getattr(self._retrieval, "close", None)
        if close is not None:
            await close()

    def default_output(self, tier: str) -> int:
        """A run's output allowance when it names none (as the submitter gives it)."""
        return self._qos.default_output(self._qos.tier(tier))

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    async def counter(self) -> PromptCounter:
        """The models' tokenizers, loaded at the first need unless given."""
        if self._counter is None:
            self._counter = await anyio.to_thread.run_sync(
                PromptCounter.from_settings, self._engines
            )
        return self._counter

    async def limits(self, model: str, tier: str, max_tokens: int) -> Limits:
        """The input budget of a run: the model's window less its output allowance, capped
        by the tier's ``max_input_tokens``; and the thresholds, as fractions of it."""
        window = (await self.counter()).window(model)
        cap = self._qos.tier(tier).max_input_tokens
        budget = max(0, min(window - max_tokens, cap if cap is not None else window))
        config = self._settings
        trigger = int(budget * config.summary_trigger)
        if config.summary_trigger_tokens is not None:
            trigger = min(trigger, config.summary_trigger_tokens)
        return Limits(
            budget=budget,
            window=window,
            output=max_tokens,
            tier_cap=cap,
            trigger=trigger,
            fold=max(1, min(int(budget * config.fold_fraction), trigger // 2)),
            snippets=config.retrieval_snippets,
            snippet_tokens=min(config.retrieval_max_tokens, budget // 4),
            snippet_chars=config.snippet_max_chars,
        )

    async def check_message(self, new: NewMessage) -> None:
        """ContextTooLong (400) if the new message alone cannot fit its run's prompt."""
        limits = await self.limits(new.model, new.tier, new.max_tokens)
        tokens = await self._tokens(new.model, new.content)
        refuse_too_long(tokens + PROMPT_OVERHEAD, limits, "the message")

    async def check_prompt(
        self, *, model: str, tier: str, max_tokens: int, messages: list[ChatMessage]
    ) -> int:
        """A program's own prompt, counted; ContextTooLong (400) if it exceeds the budget."""
        tokens = await (await self.counter()).count_async(model, messages)
        limits = await self.limits(model, tier, max_tokens)
        refuse_too_long(tokens, limits, "the prompt", param="messages")
        return tokens

    async def assemble(
        self, db: Database, chat: ChatRef, new: NewMessage, summary: ChatSummary | None = None
    ) -> Assembled:
        """The prompt of a chat's run whose new message is ``new``, within its budget (with
        ``summary`` in place of the chat's: a fold's, to warm before it lands).
        ContextTooLong if the new message (with the system prompt) cannot fit."""
        draft = await self._draft(db, chat, new, summary)
        fixed_tokens = PROMPT_OVERHEAD + draft.system[0] + draft.new.tokens
        refuse_too_long(fixed_tokens, draft.limits, "the message")
        if fixed_tokens + draft.system[1] > draft.limits.budget:  # the summary cannot fit
            draft = _without_summary(draft)
        return await self._fit(db, draft)

    async def _draft(
        self, db: Database, chat: ChatRef, new: NewMessage, pending: ChatSummary | None
    ) -> _Draft:
        async with db.reads() as s:  # read, then counted outside it
            summary, rows = await prompts.unsummarized(
                s,
                chat,
                before_seq=new.seq,
                limit=UNSUMMARIZED_LIMIT,
                summary=pending,
                after=new.after,
            )
            # the files sent with earlier questions and made by earlier answers' tools
            with_files = [row.seq for row in rows if row.role in FILE_ROLES]
            files = await attached(s, chat, new.seq, new.attachment_ids, with_files)
            mine = Instructions(*await prompts.instructions(s, chat))
        fixed = Fixed(
            self._system_prompt(new.model), summary.text, summary.through_seq, instructions=mine
        )
        system = await self._system_tokens(new.model, fixed)
        limits = await self.limits(new.model, new.tier, new.max_tokens)
        content = new.content + await files_text(  # (context/attachments.py)
            files, new, limits, system[0], self._attachments, await self.counter()
        )
        row = Row(new.seq or 0, MessageRole.USER.value, content)
        turns = await self._turns(new.model, [*rows, row])
        return _Draft(chat, new.model, fixed, turns[:-1], turns[-1], system, limits, new.content)

    async def _fit(self, db: Database, draft: _Draft) -> Assembled:
        """Compose, count exactly, and shrink the window while the count is over budget."""
        limits = draft.limits
        room = limits.budget - PROMPT_OVERHEAD - sum(draft.system) - draft.new.tokens
        outside = draft.fixed.summary_through_seq > 0 or sum(t.tokens for t in draft.history) > room
        retrieving = outside and self._retrieval is not None and limits.snippets > 0
        if retrieving:
            room -= limits.snippet_tokens
        counter = await self.counter()
        for _ in range(FIT_ATTEMPTS):
            start = window_start(draft.history, room, limits.fold)
            snippets = await self._snippets(db, draft, start) if retrieving else []
            assembled = compose(
                draft.fixed,
                draft.history,
                draft.new,
                snippets,
                start=start,
                system=draft.system,
                limits=limits,
            )
            exact = await counter.count_async(draft.model, assembled.messages)
            assembled.composition.total_tokens = exact
            if exact <= limits.budget:
                break
            room -= exact - limits.budget
        return assembled  # (still over after all attempts: the engine refuses it)

    async def _snippets(self, db: Database, draft: _Draft, start: int) -> list[Turn]:
        """The older messages (before the verbatim window) that match the new message."""
        assert self._retrieval is not None
        history = draft.history
        before = history[start].seq if start < len(history) else draft.new.seq or 2**31 - 1
        try:  # its own short transactions: none held while an embeddings endpoint answers
            found = await self._retrieval.retrieve(
                db,
                user_id=draft.chat.user_id,
                chat_id=draft.chat.chat_id,
                query=draft.question,
                before_seq=before,
                limit=draft.limits.snippets,
            )
        except Exception:  # retrieval helps a prompt; it never breaks one
            log.exception("retrieval failed in chat %s; no snippets", draft.chat.chat_id)
            return []
        config = self._settings
        wanted = (config.retrieval_min_shared_words, config.retrieval_min_shared_fraction)
        semantic = getattr(self._retrieval, "uses_embeddings", False)  # ranked by meaning
        new = draft.question
        known = _known(draft, start)
        candidates = [
            Turn(m.seq, m.role.value, excerpt(new, m.content, config.snippet_max_chars), 0)
            for m in found
            if semantic or bears_on(new, m.content, *wanted, known=known)
        ]
        counter = await self.counter()
        return pick_snippets(
            candidates, draft.limits, lambda text: counter.count_texts(draft.model, [text])[0]
        )

    async def opening(self, db: Database, user_id: str, model: str) -> list[ChatMessage]:
        """What a conversation kept nowhere (a temporary chat) begins with: the system
        message of the system prompt and the user's own instructions, if any (none with
        context management off, as a chat's)."""
        if not self._settings.enabled:
            return []
        async with db.reads() as s:
            mine = Instructions(await prompts.user_instructions(s, user_id))
        text = system_text(Fixed(self._system_prompt(model), None, 0, instructions=mine))
        return [ChatMessage("system", text)] if text else []

    def _system_prompt(self, model: str) -> str | None:
        for configured in self._engines.models:
            if configured.name == model and configured.system_prompt is not None:
                return configured.system_prompt
        return self._settings.system_prompt

    async def _system_tokens(self, model: str, fixed: Fixed) -> tuple[int, int]:
        """The system message's tokens without the summary (its overhead included), and the
        summary's."""
        counter = await self.counter()
        system = system_text(replace(fixed, summary=None))
        prompt, summary = await counter.count_texts_async(model, [system, fixed.summary or ""])
        has_system = bool(system or fixed.summary)
        return (
            prompt + MESSAGE_OVERHEAD if has_system else 0,
            summary + SUMMARY_HEADING if fixed.summary else 0,
        )

    async def _turns(self, model: str, rows: list[Row]) -> list[Turn]:
        counter = await self.counter()
        texts = [counted_text(row.content, row.parts) for row in rows]
        counts = await counter.count_texts_async(model, texts)
        return [
            Turn(row.seq, row.role, row.content, tokens + MESSAGE_OVERHEAD, row.parts)
            for row, tokens in zip(rows, counts, strict=True)
        ]

    async def _tokens(self, model: str, content: str) -> int:
        counts = await (await self.counter()).count_texts_async(model, [content])
        return counts[0] + MESSAGE_OVERHEAD


def _without_summary(draft: _Draft) -> _Draft:
    """The draft without its summary (one too long for this run's budget): the turns it
    covers are still reached through retrieval."""
    fixed = replace(draft.fixed, summary_shown=False)
    return replace(draft, fixed=fixed, system=(draft.system[0], 0))


def _known(draft: _Draft, start: int) -> frozenset[str]:
    """The words the prompt holds already (its verbatim turns and summary), as stems."""
    held = [t.content for t in draft.history[start:]]
    if draft.fixed.summary and draft.fixed.summary_shown:
        held.append(draft.fixed.summary)
    return frozenset(stems("\n".join(held), every=True))
