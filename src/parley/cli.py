"""The ``parley`` command: serve, migrate, and user administration."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from parley import crashpoints, logs
from parley.accounts.admin import add_user_parser, open_db
from parley.archive.admin import add_archive_parsers
from parley.audit.admin import add_audit_parser
from parley.capacity.cli import add_capacity_parser
from parley.config import Settings, load_settings
from parley.engines.kinds import KINDS, EngineDescriptor
from parley.engines.settings import EngineKind
from parley.errors import ConfigurationError
from parley.safety.admin import add_runs_parser

if TYPE_CHECKING:
    from parley.engines.server import EngineServer
    from parley.observability.server import MetricsServer
    from parley.services import Services
    from parley.supervision import Supervisor

log = logging.getLogger("parley")

SERVERS = {"serve", "api", "worker", "engine", "migrate"}  # logged at INFO: it is their work
Handler = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]

DESCRIPTION = (
    "parley, a self-hostable chat service: run it (serve, or api and worker, or an engine "
    "alone), migrate its database, administer users, runs and the audit log, archive idle "
    "chats, and plan capacity. `parley COMMAND --help` tells each command's options."
)


def _settings_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", dest="config_file", type=Path, help="TOML settings file")
    p.add_argument("--data-dir", type=Path, help="where the embedded SQLite database lives")
    p.add_argument("--database-url", help="sqlite:///PATH or postgresql://USER@HOST/DB")


def _process_args(p: argparse.ArgumentParser, *, http: bool, engine: bool) -> None:
    _settings_args(p)
    p.add_argument("--redis-url", help="redis://HOST:PORT/DB: the bus shared by processes")
    p.add_argument("--otlp-endpoint", help="http://HOST:4318: export traces to this collector")
    if http:
        p.add_argument("--host")
        p.add_argument("--port", type=int)
    if engine:
        p.add_argument("--engine", choices=[k.value for k in EngineKind])
        p.add_argument("--model", type=Path, help="the built-in engine's .gguf file or HF folder")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parley", description=DESCRIPTION)
    parser.add_argument(
        "--log-level", help="default: INFO for the servers, WARNING for the other commands"
    )
    parser.add_argument(
        "--log-format",
        choices=[f.value for f in logs.LogFormat],
        help="json lines, readable text, or auto (default: JSON unless stderr is a terminal)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the whole service (api + worker) in one process")
    _process_args(serve, http=True, engine=True)
    serve.set_defaults(handler=_serve)

    api = sub.add_parser("api", help="run the HTTP api only (needs --redis-url)")
    _process_args(api, http=True, engine=False)
    api.set_defaults(handler=_api)

    worker = sub.add_parser("worker", help="run a worker only (needs --redis-url)")
    _process_args(worker, http=False, engine=True)
    worker.add_argument("--metrics-port", type=int, help="serve this worker's own /metrics here")
    worker.set_defaults(handler=_worker)

    _engine_parser(sub)

    migrate = sub.add_parser("migrate", help="apply database migrations")
    _settings_args(migrate)
    migrate.set_defaults(handler=_migrate)

    add_user_parser(sub, _settings_args)  # parley user create / set-tier / list / delete / export
    add_runs_parser(sub, _settings_args)  # parley runs refused
    add_audit_parser(sub, _settings_args)  # parley audit verify / export / prune
    add_archive_parsers(sub, _settings_args)  # parley archive, parley stats
    add_capacity_parser(sub)  # parley capacity
    return parser


def _engine_parser(sub: Any) -> None:
    """``parley engine serve``."""
    engine = sub.add_parser("engine", help="run an engine on its own")
    engine_sub = engine.add_subparsers(dest="engine_command", required=True)
    engine_serve = engine_sub.add_parser(
        "serve", help="serve the built-in (or fake) engine over OpenAI's chat-completions API"
    )
    _settings_args(engine_serve)
    engine_serve.add_argument("--host")
    engine_serve.add_argument("--port", type=int)
    engine_serve.add_argument(
        "--engine", choices=[k.value for k, d in KINDS.items() if d.in_process]
    )
    engine_serve.add_argument("--model", type=Path, help="a .gguf file or HF folder (builtin)")
    engine_serve.add_argument("--served-model-name", help="the name clients ask for")
    engine_serve.set_defaults(handler=_engine_serve)


_SETTINGS_FLAGS = (
    "config_file",
    "data_dir",
    "database_url",
    "host",
    "port",
    "redis_url",
    "engine",
    "log_format",
    "metrics_port",
    "otlp_endpoint",
)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # an operator's command prints its answer, not the migrations it ran on the way (migrate
    # and the servers log their work at INFO)
    args.log_level = args.log_level or ("INFO" if args.command in SERVERS else "WARNING")
    logs.hold(args.log_level)  # the settings choose the format, and log while they load
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    overrides = {k: getattr(args, k, None) for k in _SETTINGS_FLAGS}
    model = getattr(args, "model", None)
    if model is not None:
        overrides["builtin_engine"] = {"model": model}
    try:
        # (the default secret is the servers' concern: an operator's command keeps quiet)
        settings = load_settings(**overrides, warn_default_secret=args.command in SERVERS)
    except ConfigurationError as e:
        logs.configure(args.log_format or logs.LogFormat.AUTO, args.log_level)
        print(f"parley: {e}", file=sys.stderr)
        return 2
    logs.configure(settings.observability.log_format, args.log_level)
    crashpoints.arm(settings.crash_at)  # (tests only: refused in production)
    handler: Handler = args.handler
    try:
        return _run(handler(args, settings))
    except KeyboardInterrupt:
        return 130
    except ConfigurationError as e:
        return _fail(str(e))
    except Exception as e:
        message = _unreachable(e, settings)
        if message is None:
            raise
        return _fail(message)


def _unreachable(e: Exception, settings: Settings) -> str | None:
    """What a failure to reach Redis or the database says, or None for any other error. The
    libraries are looked up, not imported: a command that never loaded one (``parley engine
    serve`` loads neither) cannot have failed in it."""
    redis_errors = sys.modules.get("redis.exceptions")
    if redis_errors is not None and isinstance(e, redis_errors.RedisError):
        return f"cannot use redis at {_redact(settings.bus.redis_url or '')}: {e}"
    sa_errors = sys.modules.get("sqlalchemy.exc")
    database_errors = (OSError,) if sa_errors is None else (OSError, sa_errors.SQLAlchemyError)
    if isinstance(e, database_errors):
        reason = getattr(e, "orig", None) or e
        return f"cannot use the database {_safe_url(settings)}: {reason}"
    return None


async def _serve(_: argparse.Namespace, settings: Settings) -> int:
    return await _http(settings, worker=True)


async def _api(_: argparse.Namespace, settings: Settings) -> int:
    if not settings.bus.redis_url:
        return _fail("parley api shares its bus with workers: give --redis-url (or use serve)")
    return await _http(settings, worker=False)


async def _http(settings: Settings, *, worker: bool) -> int:
    import uvicorn

    from parley.api.app import create_app
    from parley.api.serving import DrainingServer
    from parley.observability import tracing
    from parley.services import checked_services

    _port_free(settings.http.host, settings.http.port)  # before minutes of model loading
    services = await checked_services(settings, worker=worker)
    app = create_app(services)
    # proxy_headers off: uvicorn would believe X-Forwarded-For from 127.0.0.1; parley reads
    # it itself, from http.trusted_proxies only (api.deps.client_address)
    config = uvicorn.Config(
        app,
        host=settings.http.host,
        port=settings.http.port,
        # uvicorn sets its own loggers to this level: the one --log-level gave the root's
        log_level=logging.getLogger().getEffectiveLevel(),
        log_config=None,  # uvicorn's lines go to the root logger, in parley's format
        lifespan="on",
        proxy_headers=False,
        timeout_graceful_shutdown=settings.http.shutdown_grace_seconds,  # streams, on SIGTERM
    )
    role = "serving" if worker else "api"
    log.info("parley %s on http://%s:%d", role, settings.http.host, settings.http.port)
    tracing.configure(
        settings.observability, service=tracing.SERVICE_SERVE if worker else tracing.SERVICE_API
    )
    _freeze_startup_objects()
    try:
        await _serve_watched(DrainingServer(config, services.relay), services.supervisor)
    finally:
        tracing.shutdown()  # export the spans still pending
    return _exit_code(services.supervisor)


def _port_free(host: str, port: int) -> None:
    """ConfigurationError when another process listens on the port already."""
    import socket

    try:
        with socket.create_server((host, port), reuse_port=False):
            pass
    except OSError as e:
        raise ConfigurationError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e


async def _serve_watched(server: Any, supervisor: Supervisor) -> None:
    """``server.serve()``, stopped once the process cannot go on (``parley.supervision``)."""

    async def stop_when_fatal() -> None:
        await supervisor.fatal.wait()
        server.should_exit = True

    watcher = asyncio.create_task(stop_when_fatal())
    try:
        await server.serve()
    finally:
        watcher.cancel()


def _exit_code(supervisor: Supervisor) -> int:
    """0, or 1 with the reason when the process stopped because it could not go on."""
    if supervisor.fatal.is_set():
        return _fail(f"stopped: {supervisor.reason}")
    return 0


async def _engine_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from parley.engines.kinds import described
    from parley.supervision import Supervisor

    kind = described(settings.engines.kind)
    if not kind.in_process or kind.default_model is None:
        return _fail(f"parley engine serve runs an engine of its own, not {kind.kind.value}")
    server = _engine_server(kind, args.served_model_name, settings)
    engine, name = server.engine, server.model
    config = uvicorn.Config(
        server.app(),
        host=settings.http.host,
        port=settings.http.port,
        log_level="warning",
        log_config=None,  # uvicorn's lines go to the root logger, in parley's format
        lifespan="on",
    )
    log.info("engine serving %s on http://%s:%d/v1", name, settings.http.host, settings.http.port)
    _freeze_startup_objects()
    supervisor = Supervisor()  # an engine that failed for good: exit 1
    supervisor.watch_engine(engine)
    try:
        await _serve_watched(uvicorn.Server(config), supervisor)
    finally:
        await supervisor.close()
    return _exit_code(supervisor)


def _engine_server(kind: EngineDescriptor, name: str | None, settings: Settings) -> EngineServer:
    """The kind's engine, built for its default model (named ``name`` if given), served."""
    from parley.engines.prompt_counts import BuiltinFiles
    from parley.engines.server import EngineServer
    from parley.safety.rules import RuleSet

    assert kind.default_model is not None
    model = kind.default_model(settings.engines)
    model = model.model_copy(update={"name": name or model.name})
    files = BuiltinFiles(settings.engines.builtin.model)
    server = EngineServer(
        kind.build(model, settings.engines, files),
        model.name,
        default_max_tokens=settings.qos.default_max_tokens,
        capabilities=kind.capabilities,
    )
    server.categorize = RuleSet("rules", settings.safety.rules()).categories_of  # /v1/moderations
    return server


def _freeze_startup_objects() -> None:
    """Move everything built at start-up out of the collector's view, so a full collection
    walks only what requests create, not every module, model and table; and collect the
    young generation less often (each full pass stalls every stream at once)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


async def _worker(_: argparse.Namespace, settings: Settings) -> int:
    from parley.observability import tracing
    from parley.services import checked_services

    if not settings.bus.redis_url:
        return _fail("parley worker takes runs from a shared bus: give --redis-url (or use serve)")
    services = await checked_services(settings, worker=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tracing.configure(settings.observability, service=tracing.SERVICE_WORKER)
    await services.start()
    assert services.worker is not None
    metrics = _worker_metrics(services, settings)
    log.info("parley worker %s taking runs", services.worker.worker_id)
    fatal = asyncio.create_task(services.supervisor.fatal.wait())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({fatal, stopped}, return_when=asyncio.FIRST_COMPLETED)
    fatal.cancel()
    stopped.cancel()
    log.info("parley worker stopping: finishing runs in progress")
    await services.close(grace=settings.runs.lease_seconds)
    if metrics is not None:
        await metrics.stop()
    tracing.shutdown()  # export the spans still pending
    return _exit_code(services.supervisor)


def _worker_metrics(services: Services, settings: Settings) -> MetricsServer | None:
    """A worker's own /metrics on ``metrics_port`` (for a worker on a host of its own)."""
    seen = settings.observability
    if seen.metrics_port is None:
        return None
    from parley.observability.server import MetricsServer, metrics_app

    s = services
    app = metrics_app(s.metrics, s.bus, s.engine, seen.metrics_token, s.supervisor.failing)
    log.info("worker metrics on http://%s:%d/metrics", settings.http.host, seen.metrics_port)
    return MetricsServer(app, settings.http.host, seen.metrics_port)


async def _migrate(_: argparse.Namespace, settings: Settings) -> int:
    from parley.store.migrate import current_revision

    db = await open_db(settings)
    try:
        print(f"database at revision {await current_revision(db)}")
    finally:
        await db.dispose()
    return 0


def _run(main: Coroutine[Any, Any, int]) -> int:
    """Run on uvloop where it is installed (it is a dependency), else asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def _safe_url(settings: Settings) -> str:
    from sqlalchemy.engine import make_url

    return make_url(settings.database.resolved_url).render_as_string(hide_password=True)


def _fail(message: str) -> int:
    print(f"parley: {message}", file=sys.stderr)
    return 1
