"""The composition root: the services one process needs, built from its settings.

Every process is assembled here (``parley serve / api / worker``, the CLI, the tests), so
a service is constructed in one place: the HTTP app receives a ``Services`` and never
builds one. Importing this imports neither the HTTP layer nor an engine (built on demand).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parley.accounts.passwords import Passwords
from parley.accounts.service import Accounts
from parley.accounts.throttle import AccountThrottles
from parley.archive.archiver import Archiver
from parley.archive.periodic import archive_forever
from parley.attachments.answer_files import AnswerFiles
from parley.audit.log import AuditLog
from parley.blobs.interface import BlobStoreError
from parley.bus.interface import Bus
from parley.config import Settings
from parley.connections import build_bus, database
from parley.context.prompts import ChatContext
from parley.context.retrieval import Retriever
from parley.context.summaries import Summaries
from parley.engines.embeddings import Embedder
from parley.engines.interface import Engine
from parley.engines.prompt_counts import BuiltinFiles
from parley.engines.registry import (
    build_engine,
    capabilities,
    configured_models,
    engine_capacity,
)
from parley.engines.reports import reporter
from parley.errors import ConfigurationError
from parley.mail.outbox import Outbox
from parley.mail.smtp import Smtp
from parley.observability.metrics import Metrics, build_metrics
from parley.parsing.pool import ParsePool
from parley.portability.exports import Exports
from parley.qos.admission import Admission
from parley.qos.budget import Budget
from parley.qos.prompt_counter import PromptCounter
from parley.runs.finisher import Finisher
from parley.runs.generation import Prompting
from parley.runs.refusals import Refusals
from parley.runs.relay import Relay
from parley.runs.submit import Submitter
from parley.runs.sweeper import Sweeper
from parley.runs.tool_confirmations import Confirmations
from parley.runs.tool_rounds import ToolRounds
from parley.runs.worker import Worker
from parley.safety.moderator import Moderator
from parley.store.database import Database
from parley.store.pages import Cursors
from parley.store.routing import Reads
from parley.supervision import Supervisor
from parley.tools.toolbox import Toolbox


@dataclass(slots=True)
class Services:
    settings: Settings
    db: Database
    bus: Bus
    budget: Budget
    admission: Admission
    finisher: Finisher
    accounts: Accounts
    submitter: Submitter
    relay: Relay
    sweeper: Sweeper
    models: list[str]
    cursors: Cursors
    metrics: Metrics
    context: ChatContext
    reads: Reads
    archiver: Archiver
    parsing: ParsePool
    moderator: Moderator
    exports: Exports
    embedder: Embedder
    toolbox: Toolbox | None = None
    engine: Engine | None = None
    worker: Worker | None = None
    summaries: Summaries | None = None
    supervisor: Supervisor = field(default_factory=Supervisor)

    @property
    def audit(self) -> AuditLog:
        return self.accounts.audit

    async def start(self) -> None:
        """The background work, kept alive by the supervisor (the worker's too, if any)."""
        await self.submitter.costs.prepare()  # the models' tokenizers, to count prompts
        await self.check_blobs()
        keep = self.supervisor.keep
        keep("sweeper", self.sweeper.run_forever)
        keep("exports", self.exports.maintain_forever)
        keep("audit", self.audit.prune_forever)
        if (outbox := self.accounts.recovery.outbox) is not None:
            keep("mail", lambda: outbox.deliver_forever(self.accounts.recovery.compose))
        if (engine := self.engine) is not None:
            await engine.start()
            every = self.settings.observability.metrics_sample_seconds
            keep("metrics", lambda: self.metrics.sample_forever(engine, every))
            keep("reports", reporter(self.db, self.worker, engine, self.models, every))
            self.supervisor.watch_engine(engine)
        if self.worker is not None:
            keep("worker", self.worker.run_forever)
            if (archive := self.settings.archive).periodic:
                keep("archive", lambda: archive_forever(self.archiver, archive))

    async def check_blobs(self) -> None:
        """Bad blob store settings (credentials, bucket) stop the process at start-up."""
        if not self.settings.blobs.check_on_start:
            return
        try:
            await self.archiver.blobs.check()
        except BlobStoreError as e:
            raise ConfigurationError(f"the blob store does not work: {e}") from e

    async def close(self, grace: float = 5.0) -> None:
        self.supervisor.stopping()
        if self.worker is not None:
            await self.worker.stop(grace)
        await self.supervisor.close()
        await self.exports.close()
        await self.parsing.close()
        self.accounts.close()
        if self.summaries is not None:
            await self.summaries.close()
        await self.context.close()
        await self.moderator.close()
        await self.embedder.close()
        if self.toolbox is not None:
            await self.toolbox.close()
        if self.engine is not None:
            await self.engine.close()
        await self.bus.close()
        await self.db.dispose()
        self.metrics.close()


@dataclass(frozen=True, slots=True)
class _Core:
    """The services every other is built on (``build_services``' first step)."""

    budget: Budget
    metrics: Metrics
    admission: Admission
    reads: Reads
    finisher: Finisher
    moderator: Moderator


def _core(settings: Settings, db: Database, bus: Bus) -> _Core:
    qos = settings.qos
    budget = Budget(bus, qos)
    metrics = build_metrics(settings.observability, settings.engines, qos)
    admission = Admission(bus, qos, settings.runs, metrics=metrics)
    reads = Reads(db, bus, window=settings.database.read_your_writes_seconds)
    finisher = Finisher(db, bus, budget, admission, listeners=[metrics.run_ended], reads=reads)
    moderator = Moderator(settings.safety, qos, metrics=metrics.moderation)
    return _Core(budget, metrics, admission, reads, finisher, moderator)


def build_services(
    settings: Settings,
    *,
    passwords: Passwords | None = None,
    bus: Bus | None = None,
    db: Database | None = None,
    worker: bool = False,
) -> Services:
    """Everything one process needs, each service built whole, in order, with what it uses
    passed to it; ``worker=True`` adds the settings' engine and a worker, whose free slots
    take runs made in this process (a hand-off)."""
    models = served_models(settings)
    db = db or database(settings)
    bus = bus or build_bus(settings)
    core = _core(settings, db, bus)
    archive = archiver(settings, db)
    files = BuiltinFiles(settings.engines.builtin.model)
    engine = build_engine(settings.engines, files) if worker else None
    context = chat_context(settings, None if engine is None else files)
    rounds = tool_rounds(settings, db, bus, core, archive)
    made = None if engine is None else make_worker(settings, engine, db, bus, core, context, rounds)
    submitter = Submitter(
        db,
        bus,
        core.budget,
        settings.qos,
        settings.runs,
        models,
        core.admission,
        context,
        metrics=core.metrics,
        refusals=Refusals(db, core.finisher, core.moderator),
        archiver=archive,
        handoff=None if made is None else made[1],
        capabilities=capabilities(settings.engines),
    )
    parts = (submitter, context, archive, models, passwords, made, rounds.toolbox)
    return _assembled(settings, db, bus, core, *parts)


def tool_rounds(
    settings: Settings, db: Database, bus: Bus, core: _Core, archive: Archiver
) -> ToolRounds:
    """The server's tools (each one a tier names, else ConfigurationError), as runs call them."""
    secret = settings.secret_key.get_secret_value()
    toolbox = Toolbox(settings.tools, db, Cursors(secret), archive, settings.data_dir, secret)
    toolbox.check_tiers(settings.qos.tiers)
    made = AnswerFiles(db, archive.blobs, settings.attachments)
    return ToolRounds(
        toolbox, settings.qos, core.moderator, Confirmations(bus, settings.tools), made
    )


def chat_context(settings: Settings, files: BuiltinFiles | None) -> ChatContext:
    """``files``: what this engine read, to count prompts (None: tokenizers loaded later)."""
    counter = None if files is None else PromptCounter.from_settings(settings.engines, files=files)
    return ChatContext(
        settings.context,
        Retriever.from_settings(settings.context),
        qos=settings.qos,
        engines=settings.engines,
        attachments=settings.attachments,
        counter=counter,
    )


def accounts(settings: Settings, db: Database, bus: Bus, passwords: Passwords) -> Accounts:
    return Accounts(
        db,
        settings.accounts,
        passwords,
        AccountThrottles(bus, settings.accounts),
        secret_key=settings.secret_key.get_secret_value(),
        default_tier=settings.qos.default_tier,
        audit=AuditLog(db, settings.audit, settings.secret_key.get_secret_value()),
        tiers=list(settings.qos.tiers),
        outbox=Outbox(db, settings.mail, Smtp(settings.mail)) if settings.mail.enabled else None,
    )


def sweeper(settings: Settings, db: Database, bus: Bus, core: _Core) -> Sweeper:
    return Sweeper(
        db,
        bus,
        core.finisher,
        core.admission,
        settings.runs,
        tiers=settings.qos.tiers,
        stream_maxlen=settings.bus.stream_maxlen,
    )


def _assembled(
    settings: Settings,
    db: Database,
    bus: Bus,
    core: _Core,
    submitter: Submitter,
    context: ChatContext,
    archive: Archiver,
    models: list[str],
    passwords: Passwords | None,
    made: tuple[Engine, Worker, Summaries] | None,
    toolbox: Toolbox | None = None,
) -> Services:
    secret = settings.secret_key.get_secret_value()
    return Services(
        settings=settings,
        db=db,
        bus=bus,
        budget=core.budget,
        finisher=core.finisher,
        accounts=accounts(settings, db, bus, passwords or Passwords()),
        admission=core.admission,
        submitter=submitter,
        context=context,
        relay=Relay(db, bus, settings.runs, metrics=core.metrics),
        sweeper=sweeper(settings, db, bus, core),
        models=models,
        cursors=Cursors(secret),
        metrics=core.metrics,
        reads=core.reads,
        archiver=archive,
        parsing=ParsePool(settings.parsing),
        moderator=core.moderator,
        exports=Exports(db, archive, settings.portability, secret),
        embedder=Embedder(settings.engines.embedding_models),
        toolbox=toolbox,
        engine=None if made is None else made[0],
        worker=None if made is None else made[1],
        summaries=None if made is None else made[2],
    )


def served_models(settings: Settings) -> list[str]:
    models = configured_models(settings.engines)
    check_downgrades(settings, models)
    return models


def archiver(settings: Settings, db: Database) -> Archiver:
    """The archive over the configured blob store (``archive/``, ``blobs/``)."""
    return Archiver.from_settings(db, settings.blobs, settings.archive, settings.data_dir)


async def checked_services(settings: Settings, *, worker: bool) -> Services:
    """A process's services, once its database is migrated and its bus answers: both are
    checked before an engine is built, so a wrong URL fails at once, not after a model load."""
    from parley.store.migrate import upgrade

    db = database(settings)
    await upgrade(db)
    bus = build_bus(settings)
    await bus.ping()
    return build_services(settings, db=db, bus=bus, worker=worker)


def check_downgrades(settings: Settings, models: list[str]) -> None:
    """Every tier's ``downgrade_model`` is a model this service serves (at start-up)."""
    for name, tier in settings.qos.tiers.items():
        if tier.downgrade_model is not None and tier.downgrade_model not in models:
            raise ConfigurationError(
                f"tier {name!r}: downgrade_model {tier.downgrade_model!r} is not one of the "
                f"models served ({', '.join(models)})"
            )


def make_worker(
    settings: Settings,
    engine: Engine,
    db: Database,
    bus: Bus,
    core: _Core,
    context: ChatContext,
    tool_rounds: ToolRounds | None = None,
) -> tuple[Engine, Worker, Summaries]:
    """This process's worker around its engine, and the summaries it folds."""
    runs = settings.runs
    concurrency = runs.worker_concurrency or engine_capacity(settings.engines)
    if runs.reserved_slots >= concurrency:
        raise ConfigurationError(
            f"reserved_slots ({runs.reserved_slots}) must be below the worker's "
            f"concurrency ({concurrency}): the other tiers would get no slot"
        )
    summaries = Summaries(db, bus, settings.context)
    worker = Worker(
        db,
        bus,
        engine,
        core.finisher,
        runs,
        qos=settings.qos,
        engines=settings.engines,
        admission=core.admission,
        prompting=Prompting(db, engine, context, summaries, inputs=bus),
        concurrency=concurrency,
        metrics=core.metrics,
        moderator=core.moderator,
        tool_rounds=tool_rounds,
    )
    return engine, worker, summaries
