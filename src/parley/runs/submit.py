"""Sending a prompt: validate, honour the idempotency key, admit, persist, enqueue.

Admission reserves the run's estimated cost on the user's token budget after the
idempotency check (a same-key retry attaches to the first run and is never charged) and
before the run is stored; the run row keeps the reservation until the run ends and it is
settled. A run that is not made after all (no such chat, queue full, lost a same-key race)
gives its reservation back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Protocol

import anyio

from parley import text
from parley.accounts.principal import Principal
from parley.archive.archiver import Archiver
from parley.bus.interface import Bus, QueuedRun, QueueFull
from parley.context.prompts import ChatContext
from parley.domain import MessageRole, RunSource, utcnow
from parley.engines.interface import ChatMessage
from parley.engines.kinds import Capabilities
from parley.errors import (
    BudgetExhausted,
    Overloaded,
    PermissionDenied,
    TooManyRuns,
    ValidationFailed,
)
from parley.observability import tracing
from parley.observability.metrics import Metrics
from parley.qos.admission import Admission, Serves
from parley.qos.budget import Budget
from parley.qos.reservations import Costs
from parley.qos.settings import QosSettings
from parley.runs import rules
from parley.runs.events import made_event
from parley.runs.inputs import RunInput
from parley.runs.refusals import Refusals
from parley.runs.requests import ProgramRequest, SendRequest, program_hash
from parley.runs.rules import Rules
from parley.runs.settings import RunSettings
from parley.store import chats, new_runs, run_records
from parley.store.database import Database
from parley.store.parts import MessageParts
from parley.store.schema import Run


class Handoff(Protocol):
    """A worker in this process that takes a run claimed for it in the transaction that
    makes the run: no queue and no claim transaction on the way to the first token."""

    def take(self, priority: int) -> str | None:
        """A free slot taken for a run of ``priority`` about to be made (its worker id), or
        None (none free, or only the top tier's reserve)."""

    def give_back(self) -> None:
        """The run for the slot taken was not made after all."""

    def start(self, run: Run) -> None:
        """Generate the run made claimed (``run.worker_id``, attempt 1) in the slot taken."""

    def count_prompt_tokens(self, model: str, messages: list[ChatMessage]) -> int:
        """The prompt's length as the worker's engine counts it."""


PromptOf = Callable[[new_runs.NewRun], Awaitable[int]]
"""The tokens of the prompt a run to make will send (its cost is counted on them)."""


class Submitter:
    def __init__(
        self,
        db: Database,
        bus: Bus,
        budget: Budget,
        qos: QosSettings,
        runs: RunSettings,
        models: list[str],
        admission: Admission,
        context: ChatContext,
        *,
        metrics: Metrics | None = None,
        refusals: Refusals | None = None,
        archiver: Archiver | None = None,
        handoff: Handoff | None = None,
        capabilities: Mapping[str, Capabilities] | None = None,
    ) -> None:
        """``refusals``: prompts go through the tier's input classifiers before admission;
        ``archiver``: a message to an archived chat brings the chat back first;
        ``handoff``: runs made while it has a free slot and nothing is queued go to it
        directly (a worker in this process: ``parley serve``)."""
        self._metrics = metrics
        self._refusals = refusals
        self._admission = admission
        self.costs = Costs(db, budget, context)
        self._db = db
        self._bus = bus
        self._budget = budget
        self._settings = runs
        self._qos = qos
        self._models = models
        self.rules = Rules(qos, runs, models, capabilities)
        self._handoff = handoff
        self._archiver = archiver

    @property
    def _lease(self) -> timedelta:
        return timedelta(seconds=self._settings.lease_seconds)

    @tracing.traced(tracing.RUN_SUBMIT, result=tracing.run_attributes)
    async def submit(
        self, who: Principal, chat_id: str, req: SendRequest, idempotency_key: str | None
    ) -> Run:
        """The run for this request: a new one, or the one an earlier same-key request made."""
        _confirmed(who)
        new = self.rules.validate(who, chat_id, req, idempotency_key)
        if req.edit_of is not None or req.regenerate is not None or req.continue_of:
            await self._restored(new)  # the message named must be in the database
            async with self._db.transaction() as s:
                new = await rules.place(s, new, req)
        await self.costs.check_message(new)  # before admission: one that can never fit
        earlier = await self._moderate(new, req.content)
        return earlier or await self._admit(new, self._chat_prompt)

    @tracing.traced(tracing.RUN_SUBMIT, result=tracing.run_attributes)
    async def submit_program(
        self, who: Principal, req: ProgramRequest, idempotency_key: str | None
    ) -> Run:
        """A program's run (``/v1``): its own messages, no chat; else as ``submit``."""
        _confirmed(who)
        new = self._program_run(who, req, idempotency_key)
        new = self._kept(new, req.input) if req.store else new
        new = await self._kept_nowhere(new) if req.ephemeral else new
        counted = req.input.counted()
        tokens = await self.costs.check_program(new, counted)  # before admission
        new = await self._born_counted(new, req.input, counted, tokens)
        users = [m.content for m in req.input.messages if m.role == "user"]
        if (earlier := await self._moderate(new, "\n\n".join(users))) is not None:
            return earlier

        async def given(_: new_runs.NewRun) -> int:
            return tokens

        serves = partial(self.rules.serves, given=req.input, sampling=req.sampling)
        return await self._admit(new, given, serves)

    def _program_run(
        self, who: Principal, req: ProgramRequest, idempotency_key: str | None
    ) -> new_runs.NewRun:
        """The run a program's request asks for, its messages, model and engine checked."""
        tier = self._qos.tier(who.tier)
        for i, message in enumerate(req.input.messages):
            self.rules.check_length(message.content, f"messages[{i}].content")
        encoded = req.input.to_json()
        model = self.rules.check_model(who.tier, tier, req.model, who)
        self.rules.check_engine(model, req.input, req.sampling)
        return new_runs.NewRun(
            user_id=who.user_id,
            chat_id=None,
            content="",
            model=model,
            tier=who.tier,
            priority=tier.priority,
            max_tokens=self.rules.max_tokens(who.tier, tier, req.max_tokens),
            sampling=req.sampling,
            idempotency_key=idempotency_key,
            request_hash=program_hash(req, encoded) if idempotency_key else None,
            source=RunSource.API,
            input=encoded,
            api_key_id=who.key_id,
            traceparent=tracing.traceparent(),  # the worker's run.execute continues this trace
        )

    async def _born_counted(
        self, new: new_runs.NewRun, given: RunInput, counted: list[ChatMessage], tokens: int
    ) -> new_runs.NewRun:
        """A program's run carries its prompt's length from birth where this process counts
        it as the model's engine will (the same messages: no tools or calls counted apart),
        so its worker stores nothing between its claim and its end."""
        if new.input is None or counted != given.messages:  # a temporary chat's; tools
            return new
        at_birth = await self.costs.engine_tokens(new, counted, tokens)
        return new if at_birth is None else replace(new, prompt_tokens=at_birth)

    async def _kept_nowhere(self, new: new_runs.NewRun) -> new_runs.NewRun:
        """A temporary chat's run: its conversation on the bus alone, for the worker to read
        (a run never made leaves it to lapse), none on its row."""
        assert new.input is not None
        ttl = self._settings.temporary_input_ttl_seconds
        await self._bus.keep_input(new.run_id, new.input, ttl=ttl)
        return replace(new, input=None, ephemeral=True)

    async def _moderate(self, new: new_runs.NewRun, text: str) -> Run | None:
        """The tier's input classifiers, before admission: a refused prompt raises (and is
        stored as refused, never billed: ``runs/refusals.py``)."""
        if self._refusals is None:
            return None
        return await self._refusals.check(new, text, self._existing)

    def _kept(self, new: new_runs.NewRun, given: RunInput) -> new_runs.NewRun:
        """A kept program's run: its last message (a user's) as the chat's new message, the
        conversation before it as the chat's history, titled by its first user message."""
        last = given.messages[-1]
        if last.role != "user":
            raise ValidationFailed(
                "to keep a conversation as a chat (store), its last message must be the user's",
                code="store_needs_user_message",
                param="messages",
            )
        earlier = [
            (MessageRole(m.role), m.content, MessageParts(None, m.tool_calls, m.tool_call_id))
            for m in given.messages[:-1]
        ]
        first = next(m.content for m in given.messages if m.role == "user")
        title = text.title_from(first, self._settings.max_title_chars)
        return replace(new, content=last.content, new_chat=new_runs.NewChat(title, earlier))

    async def _admit(
        self, new: new_runs.NewRun, prompt: PromptOf, serves: Serves | None = None
    ) -> Run:
        """Admission on the bus (the user's run slot, the model's load; a downgrade only to
        a model that ``serves`` the run), then idempotency, queue room and the budget
        reservation; then the run stored and queued."""
        try:
            new = await self._admission.admit(new, serves)
        except (TooManyRuns, Overloaded):
            # a retry of a request that made its run already is answered with that run
            existing = await self._existing(new) if new.idempotency_key is not None else None
            if existing is None:
                raise
            return existing
        try:
            run = await self._admit_admitted(new, prompt)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._admission.undo(new)
            raise
        if run.id != new.run_id:  # an earlier same-key request's run: its slot is the same
            with anyio.CancelScope(shield=True):
                await self._admission.undo(new, keep_user_run=not run.status.is_terminal)
        return run

    async def _admit_admitted(self, new: new_runs.NewRun, prompt: PromptOf) -> Run:
        if new.idempotency_key is not None:
            existing = await self._existing(new)
            if existing is not None:
                return existing
        queued = await self._bus.queue_length()
        if queued >= self._qos.queue_max:
            raise await self._admission.queue_full(new, queued)
        cost = self.costs.reservation(new, await prompt(new))
        try:
            reserved = await self._budget.reserve(new.user_id, new.tier, cost)
        except BudgetExhausted:
            # a same-key request may have made the run meanwhile: attach to it, uncharged
            existing = await self._existing(new) if new.idempotency_key is not None else None
            if existing is None:
                raise
            return existing
        worker_id = self._handoff_slot(new, queued)
        if worker_id is not None:
            new = self._counted(new)
        try:
            run, created = await self._persist(
                replace(new, reserved_tokens=reserved, claimed_by=worker_id, lease=self._lease)
            )
        except BaseException:
            # (a cancellation landing in the commit itself could leave the run made and
            # refund it too; requests are not cancelled mid-handler, only at shutdown)
            await self._unmade(new, reserved, worker_id)
            raise
        if not created:  # another same-key request made it first (and paid for it)
            await self._unmade(new, reserved, worker_id)
            return run
        if self._metrics is not None:
            self._metrics.run_admitted(run)
        return await self._start(run, worker_id)

    def _handoff_slot(self, new: new_runs.NewRun, queued: int) -> str | None:
        """This process's worker's slot for the run if it may skip the queue: nothing is
        queued, or it is the top tier's (whose queued runs would hold a free slot already)."""
        if self._handoff is None:
            return None
        if queued and new.priority < self._qos.top_priority:
            return None
        return self._handoff.take(new.priority)

    def _counted(self, new: new_runs.NewRun) -> new_runs.NewRun:
        """A program's run handed off carries its prompt's length from birth (as a claim
        would store it, for whoever ends the run to charge), and the worker writes none."""
        if new.input is None or new.prompt_tokens is not None or self._handoff is None:
            return new  # a chat's prompt is its history, which the worker reads
        messages = RunInput.from_json(new.input).messages
        return replace(new, prompt_tokens=self._handoff.count_prompt_tokens(new.model, messages))

    async def _start(self, run: Run, worker_id: str | None) -> Run:
        """A run claimed at birth goes straight to this process's worker; else to the queue."""
        if worker_id is None or self._handoff is None:
            return await self._enqueue(run)
        await self._bus.append(run.id, made_event(run))
        self._handoff.start(run)
        return run

    async def _unmade(self, new: new_runs.NewRun, reserved: int, worker_id: str | None) -> None:
        if worker_id is not None and self._handoff is not None:
            self._handoff.give_back()
        await self._release(new, reserved)

    async def _existing(self, new: new_runs.NewRun) -> Run | None:
        assert new.idempotency_key is not None
        since = utcnow() - timedelta(seconds=self._settings.idempotency_ttl_seconds)
        async with self._db.reads() as s:
            run = await run_records.find_by_idempotency_key(
                s, user_id=new.user_id, key=new.idempotency_key, since=since
            )
        if run is None:
            return None
        if run.request_hash != new.request_hash:
            raise ValidationFailed(
                "this Idempotency-Key was used with a different request",
                code="idempotency_key_reused",
                param="Idempotency-Key",
            )
        return run

    async def _chat_prompt(self, new: new_runs.NewRun) -> int:
        """The tokens of a chat run's prompt, once an archived chat is back (after
        admission: a refusal reads nothing)."""
        await self._restored(new)
        return await self.costs.chat_tokens(new)

    async def _restored(self, new: new_runs.NewRun) -> None:
        """The run's chat in the database: brought back first if archived."""
        assert new.chat_id is not None
        if self._archiver is not None:
            async with self._db.reads() as s:
                chat = await chats.get_chat(s, user_id=new.user_id, chat_id=new.chat_id)
            if chat.archived_at is not None:
                await self._archiver.restore(chat)

    async def _persist(self, new: new_runs.NewRun) -> tuple[Run, bool]:
        """The new run (True), or the run that won a same-key race (False)."""
        for _ in range(2):
            try:
                return await self._made(new), True
            except new_runs.DuplicateIdempotencyKey:
                existing = await self._existing(new)
                if existing is not None:
                    return existing, False
                # the key belongs to a run older than the key's lifetime: let it go, retry
                before = utcnow() - timedelta(seconds=self._settings.idempotency_ttl_seconds)
                async with self._db.transaction() as s:
                    await run_records.forget_idempotency_keys(s, before=before)
        raise AssertionError("idempotency key conflict did not resolve")

    async def _made(self, new: new_runs.NewRun) -> Run:
        """The run written: a program's that opens no chat in one statement on its own, any
        other in a transaction with its messages (and its chat)."""
        if new.chat_id is None and new.new_chat is None:
            async with self._db.alone() as conn:
                return await new_runs.create_program_run(conn, new)
        async with self._db.transaction() as s:
            if new.chat_id is not None:
                chat = await chats.get_chat(s, user_id=new.user_id, chat_id=new.chat_id)
                new = rules.placed(new, chat)
            return await new_runs.create_run(s, new)

    async def _enqueue(self, run: Run) -> Run:
        await self._bus.append(run.id, made_event(run))
        try:
            await self._bus.enqueue(QueuedRun(run.id, run.priority))
        except QueueFull:
            async with self._db.transaction() as s:
                stored = await run_records.get_run(s, user_id=run.user_id, run_id=run.id)
                reserved = await run_records.take_reservation(s, run_id=run.id)
                await run_records.delete_run(s, stored)
            if reserved is not None:
                await self._budget.release(run.user_id, run.tier, reserved)
            raise
        return run

    async def _release(self, new: new_runs.NewRun, reserved: int) -> None:
        """Give back the reservation of a run that was not made, even while cancelled."""
        with anyio.CancelScope(shield=True):
            await self._budget.release(new.user_id, new.tier, reserved)


def _confirmed(who: Principal) -> None:
    """A new account whose email the operator wants confirmed chats once it is."""
    if not who.email_confirmed:
        raise PermissionDenied(
            "confirm your email first: follow the link we mailed you (or ask for another)",
            code="email_unconfirmed",
        )
