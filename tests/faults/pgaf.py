"""A pg_auto_failover formation on one machine, from Debian's packages
(``postgresql-15-auto-failover``, ``pg-auto-failover-cli``): a monitor and two Postgres
nodes, each a ``pg_autoctl`` service on a free port under a temporary directory, for the
failover test (``tests/faults/test_failover.py``) and ``bench/failover.py``.

Postgres refuses to run as root: run as root, every ``pg_autoctl`` runs as the ``postgres``
user (the directory is made theirs); run as anyone else, as that user. ``unavailable()``
says why a formation cannot run here (no ``pg_autoctl``, no Postgres with the extension, no
user to run it as), or None.

Two details of a formation on one small machine: a standby's first copy
(``pg_basebackup``) waits for a spread checkpoint of the primary (minutes at the default
``checkpoint_timeout``), so the harness asks the primary for a ``CHECKPOINT`` while a
standby catches up; and ``pg_autoctl perform failover`` returns once the new primary takes
writes, so ``failover()`` then waits for the old primary to be a standby again (the
formation can fail over again only then). ``crash_primary()`` kills the primary's service
and Postgres instead (a crashed host) and lets the monitor's health checks find out.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.processes import free_port

PG_AUTOCTL = shutil.which("pg_autoctl") or "/usr/bin/pg_autoctl"
DB_NAME = "parley"
STABLE = ("primary", "secondary")


def _pg_bindir() -> Path | None:
    """The newest Postgres whose server has the pgautofailover extension."""
    for pg_ctl in sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True):
        version = Path(pg_ctl).parents[1].name
        if Path(f"/usr/share/postgresql/{version}/extension/pgautofailover.control").exists():
            return Path(pg_ctl).parent
    return None


def _run_as() -> str | None:
    """The user pg_autoctl runs as: postgres when we are root, else ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "?"
    return "postgres"


def unavailable() -> str | None:
    """Why a formation cannot run on this machine, or None if it can."""
    if not Path(PG_AUTOCTL).exists():
        return "pg_autoctl is not installed (Debian: pg-auto-failover-cli)"
    if _pg_bindir() is None:
        return "no Postgres with the pgautofailover extension (postgresql-15-auto-failover)"
    if _run_as() == "?":
        return "running as root and there is no postgres user to run Postgres as"
    return None


@dataclass(frozen=True)
class NodeState:
    name: str
    port: int
    reported: str
    assigned: str


class Formation:
    """``start()``, then ``primary_url`` / ``replica_url`` for parley, ``failover()`` (timed),
    and ``stop()`` (which also removes the directory)."""

    def __init__(self, nodes: int = 2) -> None:
        bindir = _pg_bindir()
        if bindir is None or unavailable():
            raise RuntimeError(unavailable() or "no Postgres")
        self.bindir = bindir
        self.user = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="parley-pgaf-"))
        self.monitor_port = free_port()
        self.ports = {f"node{n + 1}": free_port() for n in range(nodes)}
        self._services: dict[str, tuple[subprocess.Popen[bytes], Any]] = {}
        if self.user is not None:
            shutil.chown(self.root, self.user, self.user)

    # -- the URLs parley is given -----------------------------------------------------------

    def _hosts(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    @property
    def primary_url(self) -> str:
        """libpq's form: every node, the one that takes writes chosen at connect time."""
        return f"postgresql://postgres@{self._hosts()}/{DB_NAME}?target_session_attrs=read-write"

    @property
    def replica_url(self) -> str:
        return (
            f"postgresql://postgres@{self._hosts()}/{DB_NAME}?target_session_attrs=prefer-standby"
        )

    def node_url(self, name: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.ports[name]}/{DB_NAME}"

    # -- running pg_autoctl -----------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return {
            "PATH": f"{self.bindir}:/usr/bin:/bin",
            "HOME": str(self.root),
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_DATA_HOME": str(self.root / "share"),
            "XDG_RUNTIME_DIR": str(self.root / "run"),
            "PG_CONFIG": str(self.bindir / "pg_config"),
            "LANG": "C.UTF-8",
        }

    def _ctl(self, *args: str, timeout: float = 60) -> str:
        r = subprocess.run(
            [PG_AUTOCTL, *args],
            env=self._env(),
            user=self.user,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
        )
        if r.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}")
        return r.stdout

    def _service(self, name: str, *args: str, run: bool = True) -> None:
        """``pg_autoctl create … --run`` (or ``run``): the node's service, in the background."""
        log = (self.root / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [PG_AUTOCTL, *args, *(["--run"] if run else [])],
            env=self._env(),
            user=self.user,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            start_new_session=True,
        )
        self._services[name] = (proc, log)

    def _common(self, name: str, port: int) -> list[str]:
        return [
            "--pgdata",
            str(self.root / name),
            "--pgport",
            str(port),
            "--pgctl",
            str(self.bindir / "pg_ctl"),
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
        ]

    @property
    def monitor_uri(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor_port}/pg_auto_failover?sslmode=disable"

    def start(self, timeout: float = 120) -> Formation:
        """The monitor, then the nodes one after the other; returns once one node is the
        primary and every other one its secondary."""
        deadline = time.monotonic() + timeout
        self._service("monitor", "create", "monitor", *self._common("monitor", self.monitor_port))
        self._wait(lambda: self._monitor_ready(), "the monitor", deadline)
        for name, port in self.ports.items():
            self._service(
                name,
                "create",
                "postgres",
                *self._common(name, port),
                "--listen",
                "127.0.0.1",
                "--monitor",
                self.monitor_uri,
                "--dbname",
                DB_NAME,
                "--name",
                name,
            )
            want = list(self.ports).index(name) + 1
            self._wait(lambda n=want: self._settled(n), f"{name} to join", deadline)
        return self

    def _monitor_ready(self) -> bool:
        try:
            self._ctl("show", "state", "--monitor", self.monitor_uri, timeout=10)
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        return True

    def states(self) -> list[NodeState]:
        out = self._ctl("show", "state", "--monitor", self.monitor_uri, "--json", timeout=20)
        rows = json.loads(out) if out.strip() else []
        return [
            NodeState(
                r["nodename"],
                int(r["nodeport"]),
                r["current_group_state"],
                r["assigned_group_state"],
            )
            for r in rows
        ]

    def _settled(self, nodes: int) -> bool:
        """``nodes`` nodes, settled: one primary (``single`` when alone), the rest secondaries."""
        states = self.states()
        if len(states) < nodes:
            return False
        wanted = ("single",) if nodes == 1 else STABLE
        if all(s.reported == s.assigned and s.reported in wanted for s in states):
            return sum(s.reported in ("primary", "single") for s in states) == 1
        self._checkpoint_while_catching_up(states)
        return False

    def _checkpoint_while_catching_up(self, states: list[NodeState]) -> None:
        """A standby's base backup waits for the primary's next checkpoint: ask for it."""
        if not any(s.assigned in ("catchingup", "wait_standby") for s in states):
            return
        for s in states:
            if s.reported in ("primary", "wait_primary", "single"):
                self._psql(s.name, "CHECKPOINT")

    def _psql(self, node: str, sql: str) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                [str(self.bindir / "psql"), "-h", "127.0.0.1", "-p", str(self.ports[node]),
                 "-U", "postgres", "-d", DB_NAME, "-qAtc", sql],
                capture_output=True,
                timeout=20,
                check=False,
            )  # fmt: skip

    def primary(self) -> str:
        return next(s.name for s in self.states() if s.reported in ("primary", "single"))

    def failover(self, timeout: float = 90) -> float:
        """``pg_autoctl perform failover``; the seconds until the old primary is a standby
        again (the formation is settled, ready for another failover)."""
        before = self.primary()
        started = time.monotonic()
        self._ctl("perform", "failover", "--monitor", self.monitor_uri, timeout=timeout)
        deadline = started + timeout
        self._wait(lambda: self.primary() != before, "a new primary", deadline)
        self._wait(lambda: self._settled(len(self.ports)), "the formation to settle", deadline)
        return time.monotonic() - started

    def crash_primary(self, timeout: float = 120) -> tuple[float, float]:
        """SIGKILL the primary's pg_autoctl and its Postgres (a crashed host): the monitor
        promotes the standby once its health checks give up on the primary. Then the node is
        started again and rejoins as a standby. The seconds until the standby was promoted,
        and until the formation settled again."""
        before = self.primary()
        proc, log = self._services.pop(before)
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the service and its Postgres
        proc.wait(timeout=10)
        log.close()
        deadline = started + timeout
        self._wait(lambda: self._promoted_other_than(before), "the standby promoted", deadline)
        promoted = time.monotonic() - started
        self._service(before, "run", "--pgdata", str(self.root / before), run=False)
        self._wait(lambda: self._settled(len(self.ports)), "the formation to settle", deadline)
        return promoted, time.monotonic() - started

    def tune_monitor(self, **settings: str) -> None:
        """Set the monitor's ``pgautofailover.*`` settings (e.g. ``primary_demote_timeout="10s"``)
        and reload it."""
        statements = [f"ALTER SYSTEM SET pgautofailover.{k} = '{v}'" for k, v in settings.items()]
        for sql in [*statements, "SELECT pg_reload_conf()"]:
            subprocess.run(
                [str(self.bindir / "psql"), "-h", "127.0.0.1", "-p", str(self.monitor_port),
                 "-U", "postgres", "-d", "pg_auto_failover", "-qAtc", sql],
                capture_output=True,
                timeout=20,
                check=True,
            )  # fmt: skip

    def _promoted_other_than(self, name: str) -> bool:
        takes_writes = ("wait_primary", "primary")
        return any(
            s.name != name and s.reported == s.assigned and s.reported in takes_writes
            for s in self.states()
        )

    def _wait(self, check: Any, what: str, deadline: float) -> None:
        while True:
            for proc, _ in self._services.values():
                if proc.poll() is not None:
                    raise RuntimeError(f"a pg_autoctl service exited early:\n{self.logs()}")
            try:
                if check():
                    return
            except RuntimeError:
                pass  # the monitor not answering yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"pg_auto_failover: no {what} in time:\n{self.logs()}")
            time.sleep(0.5)

    def logs(self, lines: int = 15) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop every service (nodes first, then the monitor) and remove the directory."""
        names = [*self.ports, "monitor"]
        for name in names:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self._ctl("stop", "--pgdata", str(self.root / name), "--fast", timeout=30)
        for proc, log in self._services.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its session: the service, its Postgres
                proc.wait(timeout=10)
            log.close()
        shutil.rmtree(self.root, ignore_errors=True)
