"""``run_python``: the model's Python, run in a bubblewrap sandbox.

The code runs as an unprivileged user id of the parley user's own (``uid`` plus a hash of
their id: the process limit is counted per user id, so one user's fork bomb exhausts only
their own) in new namespaces of every kind (no
network: only a loopback device with nothing behind it; its own PIDs, IPC, hostname), on a
filesystem of its own: the host's ``/usr`` read-only (the interpreter and its standard
library), a private ``/tmp``, ``/proc`` and ``/dev``, and one writable directory, the
chat's scratch directory (``<data_dir>/sandbox/<user>/<chat>``, fresh for each chat, kept
between its calls) as ``/work``. Nothing else of the host is there: not ``/etc``, not the
server's data directory. Resource limits, inherited from the process that starts the
sandbox: CPU seconds, address space, processes (a fork bomb meets ``RLIMIT_NPROC``), the
size of a file (``RLIMIT_FSIZE``); a wall-clock deadline kills the whole process group; the
output is read up to ``max_output_chars`` and the sandbox killed past it. Each ends as an
outcome the model and the user are told, never an error of the run.

The files a call writes or changes in ``/work`` (up to ``answer_files``, each up to
``answer_file_mb``) come back with its outcome, kept as attachments of the answer
(``tool_rounds``). They are read as the sandbox left them, never followed: a symbolic link,
a hard link or anything but a regular file is not read (the code could point one at the
host's files, which the server can read and the sandbox cannot).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import resource
import shutil
import signal
import stat
from functools import partial
from pathlib import Path
from typing import Any

from parley.engines.tools import FunctionSpec, ToolSpec
from parley.tools.interface import ToolContext, ToolFile, ToolOutcome, ToolStatus
from parley.tools.settings import SandboxSettings

SPEC = ToolSpec(
    type="function",
    function=FunctionSpec(
        name="run_python",
        description="Run Python 3 code in a sandbox (no network; files in /work stay for "
        "this chat) and read what it prints.",
        parameters={
            "type": "object",
            "properties": {"code": {"type": "string", "maxLength": 20_000}},
            "required": ["code"],
            "additionalProperties": False,
        },
    ),
)


def unavailable(settings: SandboxSettings, data_dir: Path) -> str | None:
    """Why this machine cannot sandbox (None: it can): bubblewrap or the interpreter
    missing, or a directory above the scratch directories the sandbox's user cannot pass
    through (bubblewrap binds the scratch directory by its path, as that user)."""
    if shutil.which(settings.bwrap) is None:
        return f"{settings.bwrap} is not installed (Debian: bubblewrap)"
    if not Path(settings.python).exists():
        return f"{settings.python} is not there"
    for folder in [data_dir.resolve(), *data_dir.resolve().parents]:
        mode = folder.stat().st_mode if folder.exists() else 0o755
        if not mode & 0o001:
            return f"{folder} cannot be passed through by the sandbox's users (o+x)"
    return None


class RunPython:
    def __init__(self, settings: SandboxSettings, data_dir: Path) -> None:
        self.settings = settings
        self._root = data_dir / "sandbox"

    @property
    def spec(self) -> ToolSpec:
        return SPEC

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> ToolOutcome:
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolOutcome.refused("run_python needs code")
        uid = self.uid_of(context.user_id)
        scratch = await asyncio.to_thread(self._scratch, context, uid)
        before = await asyncio.to_thread(_state, scratch)
        proc = await asyncio.create_subprocess_exec(
            *self._command(scratch),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=partial(self._limits, uid),  # set in the child before it execs
            start_new_session=True,
        )
        try:
            outcome = await self._outcome(proc, code, scratch)
        finally:
            _kill(proc)
            await _drained(proc)
        return await asyncio.to_thread(self._with_files, outcome, scratch, before)

    def _with_files(self, outcome: ToolOutcome, scratch: Path, before: _State) -> ToolOutcome:
        """The outcome with the files the call wrote or changed (within the limits; those
        left out named in its content)."""
        s = self.settings
        changed = [name for name, seen in _state(scratch).items() if before.get(name) != seen]
        if not changed or s.answer_files == 0:
            return outcome
        files: list[ToolFile] = []
        left: list[str] = []
        for name in sorted(changed):
            data = _read_file(scratch / name, int(s.answer_file_mb * 1024 * 1024))
            if data is None or len(files) >= s.answer_files:
                left.append(name)
            else:
                files.append(ToolFile(name, data))
        note = f"\n[attached to the answer: {', '.join(f.name for f in files) or 'none'}"
        note += f"; not attached: {', '.join(left)}]" if left else "]"
        return ToolOutcome(outcome.status, outcome.content + note, tuple(files))

    def uid_of(self, user_id: str) -> int:
        """The user id a parley user's code runs as (the same each time: their files)."""
        digest = hashlib.sha256(user_id.encode()).digest()
        return self.settings.uid + int.from_bytes(digest[:8], "big") % self.settings.uids

    def _scratch(self, context: ToolContext, uid: int) -> Path:
        """The chat's scratch directory, made (owned by the user's sandbox id) when first used."""
        folder = self._root / _safe(context.user_id) / _safe(context.chat_id or context.run_id)
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, uid, uid)
        return folder

    def _command(self, scratch: Path) -> list[str]:
        s = self.settings
        return [
            s.bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64",
            "--proc", "/proc",
            "--dev", "/dev",
            "--tmpfs", "/tmp",  # noqa: S108 (the sandbox's own, empty /tmp)
            "--bind", str(scratch), "/work",
            "--chdir", "/work",
            "--clearenv",
            "--setenv", "PATH", "/usr/bin",
            "--setenv", "HOME", "/work",
            "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
            s.python, "-I", "-",
        ]  # fmt: skip

    def _limits(self, uid: int) -> None:
        """In the child, before bubblewrap starts: the limits, then the unprivileged user."""
        s = self.settings
        mb = 1024 * 1024
        # SIGXCPU at the soft limit (it ends Python), SIGKILL a second later
        resource.setrlimit(resource.RLIMIT_CPU, (s.cpu_seconds, s.cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_AS, (s.memory_mb * mb, s.memory_mb * mb))
        resource.setrlimit(resource.RLIMIT_NPROC, (s.max_processes, s.max_processes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (s.max_file_mb * mb, s.max_file_mb * mb))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    async def _outcome(
        self, proc: asyncio.subprocess.Process, code: str, scratch: Path
    ) -> ToolOutcome:
        assert proc.stdin is not None and proc.stdout is not None
        with contextlib.suppress(ConnectionError):  # it ended before reading its code
            proc.stdin.write(code.encode())
            await proc.stdin.drain()
            proc.stdin.close()
        limit = self.settings.max_output_chars
        try:
            async with asyncio.timeout(self.settings.wall_seconds):
                printed = await _read(proc.stdout, limit * 4)
                if printed is not None:  # (past the limit: stopped, not waited for)
                    await proc.wait()
        except TimeoutError:
            return ToolOutcome(
                ToolStatus.TIMEOUT, f"the code ran longer than {self.settings.wall_seconds:g} s"
            )
        text = None if printed is None else printed.decode(errors="replace")
        if text is None or len(text) > limit:
            return ToolOutcome.error(f"the code printed more than {limit} characters; stopped")
        return self._ended(proc.returncode, text, scratch)

    def _ended(self, returncode: int | None, printed: str, scratch: Path) -> ToolOutcome:
        s = self.settings
        # bubblewrap exits with its child's status: 128 + the signal that ended it
        why = {
            128 + signal.SIGXCPU: f"the code used more than {s.cpu_seconds} s of CPU",
            128
            + signal.SIGKILL: f"the code was killed: it used more than {s.cpu_seconds} s of CPU",
        }.get(returncode or 0)
        if "[Errno 27] File too large" in printed:  # (Python ignores SIGXFSZ: EFBIG instead)
            why = f"the code wrote a file larger than {s.max_file_mb} MB"
        files = _listing(scratch)
        if why is not None:
            return ToolOutcome.error(f"{why}\n{printed[-2000:]}")
        status = ToolStatus.OK if returncode == 0 else ToolStatus.ERROR
        head = "" if returncode == 0 else f"exit status {returncode}\n"
        return ToolOutcome(status, f"{head}{printed}{files}")


async def _read(stream: asyncio.StreamReader, limit: int) -> bytes | None:
    """Everything up to the end, or None past ``limit`` bytes (then the reading stops)."""
    chunks, size = [], 0
    while chunk := await stream.read(65536):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(chunks)


_State = dict[str, tuple[int, int]]


def _state(scratch: Path) -> _State:
    """The scratch directory's entries (top level, not followed): name → (size, mtime)."""
    try:
        entries = list(os.scandir(scratch))[:1000]
    except OSError:
        return {}
    found = {}
    for entry in entries:
        with contextlib.suppress(OSError):
            info = entry.stat(follow_symlinks=False)
            found[entry.name] = (info.st_size, info.st_mtime_ns)
    return found


def _read_file(path: Path, limit: int) -> bytes | None:
    """A regular file's bytes, up to ``limit`` (None: larger, or not a plain file of its
    own: a link, a directory, a device, a FIFO — never followed, never blocked on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_size > limit:
            return None
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def _listing(scratch: Path) -> str:
    try:
        names = sorted(p.name for p in scratch.iterdir())[:50]
    except OSError:
        return ""
    return f"\n[files in /work: {', '.join(names)}]" if names else ""


async def _drained(proc: asyncio.subprocess.Process) -> None:
    """Its output read to the end (what a killed sandbox left in the pipe), then its exit:
    a pipe left full would keep it from ever being reaped."""
    assert proc.stdout is not None
    with contextlib.suppress(ConnectionError):
        while await proc.stdout.read(1 << 20):
            pass
    await proc.wait()


def _kill(proc: asyncio.subprocess.Process) -> None:
    """The sandbox's whole process group, if it still runs."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:80] or "_"
