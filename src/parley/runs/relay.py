"""Relaying a run's stream to a client as SSE, resumable from any event id.

A client that disconnects only stops its relay; the run goes on. Reconnecting
with ``Last-Event-ID`` gives exactly the events after that id (ids are checked
before any byte is sent). When a read finds nothing after the id and the run has ended
(its stream expired, the id past its end, or its end never reached the stream, which is
read once more first), the stored message is sent as one ``delta`` (``replace: true``)
and a ``done``.

On SIGTERM the api process drains (``drain``): each resumable stream (``open``: the SSE of
``/api``) ends after its next batch or keep-alive with an ``error`` ``server_restarting``
without an id, whose ``retry_after`` says when to resume by ``Last-Event-ID`` (through the
proxy, on another api process). ``/v1`` streams, which their clients cannot resume, go on
until their end or the shutdown's grace.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncIterator

import anyio

from parley.accounts.principal import Principal
from parley.bus.interface import Bus, EventKind, StreamEntry, valid_entry_id
from parley.errors import DependencyUnavailable, InvalidRequest, RateLimited
from parley.observability.metrics import Metrics
from parley.outages import OUTAGE_EXCEPTIONS, outage
from parley.runs.events import PING, Batch, delta_event, done_event, error_event, sse_frame
from parley.runs.settings import RunSettings
from parley.store import run_records
from parley.store.database import Database
from parley.store.schema import Run

log = logging.getLogger(__name__)

# a run stored as ended whose stream lacks its end: how long its last events are waited for
END_GRACE_SECONDS = 0.5
# a drained stream's client resumes after this long (on another api process)
RESUME_AFTER_RESTART_SECONDS = 1.0
STORED_ID = "0-1"
STORED_DONE_ID = "0-2"


class Relay:
    def __init__(
        self, db: Database, bus: Bus, settings: RunSettings, *, metrics: Metrics | None = None
    ) -> None:
        self._db = db
        self._bus = bus
        self._settings = settings
        self._metrics = metrics
        self._draining = False

    def drain(self) -> None:
        """The process is shutting down: every resumable stream ends at its next batch or
        keep-alive with the ``server_restarting`` hint (see the module's docstring)."""
        self._draining = True

    async def open(
        self, who: Principal, run_id: str, last_event_id: str | None, *, owned: bool = False
    ) -> AsyncIterator[str]:
        """Check access and take a stream slot now (errors before any byte is sent); the
        run's events as SSE frames.

        ``owned``: the caller has just made or read this run for this user."""
        batches = await self.batches(who, run_id, last_event_id, owned=owned, resumable=True)
        return _frames(batches)

    async def batches(
        self,
        who: Principal,
        run_id: str,
        last_event_id: str | None,
        *,
        owned: bool = False,
        resumable: bool = False,
    ) -> AsyncIterator[Batch]:
        """As ``open``, the run's stream entries themselves, as many at once as one read of
        the bus gave (``[PING]`` after each quiet interval): a relay writes each batch to
        its client in one piece, not an event at a time."""
        after = resume_after(last_event_id)
        ended = False
        if not owned:
            async with self._db.transaction() as s:
                run = await run_records.get_run(s, user_id=who.user_id, run_id=run_id)
            ended = run.status.is_terminal
        slot = secrets.token_hex(8)
        if not await self._hold(who, slot):
            raise RateLimited(
                f"at most {self._settings.max_open_streams_per_user} open streams per user",
                code="too_many_streams",
                retry_after=self._settings.ping_interval_seconds,
            )
        return self._relay(who, run_id, after, slot, ended=ended, resumable=resumable)

    async def _hold(self, who: Principal, slot: str) -> bool:
        """Take, or refresh, one of the user's stream slots (a held slot always refreshes)."""
        return await self._bus.open_stream(
            who.user_id,
            slot,
            limit=self._settings.max_open_streams_per_user,
            ttl=self._settings.ping_interval_seconds * 2 + 5,
        )

    async def _relay(
        self,
        who: Principal,
        run_id: str,
        after: str | None,
        slot: str,
        *,
        ended: bool,
        resumable: bool,
    ) -> AsyncIterator[Batch]:
        """Entries after ``after`` until ``done``, and ``PING`` after each quiet interval.
        With nothing (more) to read, a run that has ended answers from the store and closes:
        its stream is gone, the client's id lies past its end, or its end never reached the
        stream (after one more read of it); an ended run is looked at before any wait."""
        resumed = after is not None
        wait = 0.0 if ended else self._settings.ping_interval_seconds
        if self._metrics is not None:
            self._metrics.stream_opened(resumed=resumed)
        try:
            async for batch in self._follow(who, run_id, after, slot, wait=wait):
                yield batch
                if resumable and self._draining and not _ends(batch):
                    yield [_restarting_entry()]
                    return
        except OUTAGE_EXCEPTIONS as e:  # the bus went away: the client is told to resume
            down = outage(e)
            assert down is not None
            yield [_outage_entry(down)]
        finally:
            # the client is gone and this task is being cancelled: give the slot back anyway
            if self._metrics is not None:
                self._metrics.stream_closed()
            with anyio.CancelScope(shield=True), contextlib.suppress(*OUTAGE_EXCEPTIONS):
                await self._bus.close_stream(who.user_id, slot)

    async def _follow(
        self,
        who: Principal,
        run_id: str,
        after: str | None,
        slot: str,
        *,
        wait: float,
    ) -> AsyncIterator[Batch]:
        """The relay's loop (``_relay``); a bus or database outage raises out of it."""
        lingered = False
        while True:
            entries = await self._bus.read(run_id, after, timeout=wait)
            wait = self._settings.ping_interval_seconds
            if entries:
                batch = _to_done(entries)
                yield batch
                if len(batch) < len(entries) or batch[-1].event.kind is EventKind.DONE:
                    return
                after = batch[-1].id
                continue
            # nothing came in a whole interval: has the run ended without its end reaching
            # the stream (the stream gone or trimmed, the worker unable to publish its end)?
            stored = await self._stored(who, run_id)
            if stored is not None:
                if not lingered and await self._bus.stream_exists(run_id):
                    # its last events may still be on their way (appends are batched):
                    # read the stream once more before answering from the store
                    lingered, wait = True, END_GRACE_SECONDS
                    continue
                yield stored
                return
            yield [PING]
            await self._hold(who, slot)  # refresh the slot this stream holds

    async def _stored(self, who: Principal, run_id: str) -> list[StreamEntry] | None:
        """The finished run from the store as a ``delta`` (``replace``) and ``done``; None
        while it has not ended, or while the database cannot say (an outage): the stream
        goes on through the bus, whose events do not need the database."""
        try:
            async with self._db.transaction() as s:
                run = await run_records.get_run(s, user_id=who.user_id, run_id=run_id)
                content = await run_records.answer(s, run)
        except OUTAGE_EXCEPTIONS as e:
            if outage(e) is None:
                raise
            log.info("run %s: the database cannot say if it ended; streaming on", run_id)
            return None
        if not run.status.is_terminal:
            return None
        return [
            StreamEntry(STORED_ID, delta_event(content, run.completion_tokens or 0, replace=True)),
            StreamEntry(STORED_DONE_ID, done_event(run)),
        ]


def _outage_entry(down: DependencyUnavailable) -> StreamEntry:
    """The stream's last event when the bus goes away under it: an ``error`` without an id
    (``dependency_unavailable``, ``retry_after``): the client resumes from its last id."""
    message = f"{down.message.split(';')[0]}; resume this stream with Last-Event-ID"
    return StreamEntry("", error_event(down.code, message, retry_after=down.retry_after))


def _ends(batch: Batch) -> bool:
    last = batch[-1]
    return isinstance(last, StreamEntry) and last.event.kind is EventKind.DONE


def _restarting_entry() -> StreamEntry:
    """A drained stream's last event: an ``error`` without an id (``server_restarting``)."""
    message = "this server is restarting; resume this stream with Last-Event-ID"
    retry = RESUME_AFTER_RESTART_SECONDS
    return StreamEntry("", error_event("server_restarting", message, retry_after=retry))


def _to_done(entries: list[StreamEntry]) -> list[StreamEntry]:
    """The entries up to and with the first ``done`` (all of them if there is none)."""
    for i, entry in enumerate(entries):
        if entry.event.kind is EventKind.DONE:
            return entries[: i + 1]
    return entries


async def _frames(batches: AsyncIterator[Batch]) -> AsyncIterator[str]:
    """Each batch of entries as SSE frames in one piece; a ping as an SSE comment."""
    async for batch in batches:
        yield "".join(sse_frame(entry) for entry in batch)


def resume_after(last_event_id: str | None) -> str | None:
    """The one check of a client's ``Last-Event-ID`` (header or query): an id the bus could
    have issued (ASCII digits, ``<ms>-<seq>``), else InvalidRequest before any byte."""
    if last_event_id is not None and not valid_entry_id(last_event_id):
        raise InvalidRequest(
            "Last-Event-ID is not an event id of this stream",
            code="invalid_last_event_id",
            param="Last-Event-ID",
        )
    return last_event_id


async def run_of(db: Database, who: Principal, run_id: str) -> Run:
    async with db.transaction() as s:
        return await run_records.get_run(s, user_id=who.user_id, run_id=run_id)
