"""Compile ``decode.c`` with the machine's C compiler, once, and load it.

The library is built for this CPU (``-march=native``: AVX-512 where there is AVX-512, AVX2
where not), so it is compiled where it runs, not shipped: the first start takes ~1-2 s more
and caches the result under ``~/.cache/parley/native/``, keyed by the source, the compiler,
its flags and the CPU's flags, so a later start (or another CPU) finds the right one (a cache
that cannot be written, as an image's read-only home, builds into the temporary directory). No
compiler, or a failed build, is not an error: the engine then runs its PyTorch path alone
(``NativeUnavailable`` says why).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from parley.engines.builtin.precision import cpu_flags

log = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path("~/.cache/parley/native")
FLAGS = (
    "-O3",
    "-fopenmp",
    "-fPIC",
    "-shared",
    "-std=c11",
    "-ffp-contract=fast",
    "-Wno-psabi",
)
COMPILE_TIMEOUT_S = 120


class NativeUnavailable(RuntimeError):
    """The native step cannot be had here: no compiler, or it failed (the message says)."""


def source() -> str:
    return resources.files(__package__).joinpath("decode.c").read_text()


def compiler() -> str:
    found = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if found is None:
        raise NativeUnavailable("no C compiler on PATH (cc, gcc or $CC)")
    return found


def flags(march: str = "native") -> tuple[str, ...]:
    """The compiler's flags: ``march`` is the CPU to build for (``native``: this one; tests
    build the AVX2 and plain x86-64 variants too, ``x86-64-v3`` and ``x86-64``)."""
    return (*FLAGS, f"-march={march}")


def library_path(cache_dir: Path | None = None, march: str = "native") -> Path:
    """Where this source, built by this compiler for this CPU, lives (built or not)."""
    cc = compiler()
    key = hashlib.sha256()
    parts = (source(), cc, _version(cc), " ".join(flags(march)), " ".join(sorted(cpu_flags())))
    for part in parts:
        key.update(part.encode())
        key.update(b"\0")
    return (cache_dir or DEFAULT_CACHE_DIR).expanduser() / f"decode-{key.hexdigest()[:16]}.so"


def load(cache_dir: Path | None = None, march: str = "native") -> ctypes.CDLL:
    """The library, compiled first if this machine has not built it yet."""
    path = library_path(cache_dir, march)
    if not path.is_file():
        path = _writable(path)
        if not path.is_file():
            _compile(path, march)
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        raise NativeUnavailable(f"could not load {path}: {exc}") from exc


def _writable(path: Path) -> Path:
    """``path``, or the same name under the temporary directory when its cache directory
    cannot be made or written (a container's read-only root: built once per container)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if os.access(path.parent, os.W_OK):
            return path
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / "parley-native" / path.name


def _compile(path: Path, march: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.with_suffix(".c")
    src.write_text(source())
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    cmd = [compiler(), *flags(march), "-o", str(tmp), str(src), "-lm"]
    try:
        # the compiler found on PATH, our own source and fixed flags: no outside input
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NativeUnavailable(f"compiling the native decode step failed: {exc}") from exc
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise NativeUnavailable(
            f"compiling the native decode step failed ({' '.join(cmd)}): {done.stderr[-2000:]}"
        )
    tmp.replace(path)
    log.info("compiled the native decode step: %s", path)


def _version(cc: str) -> str:
    try:
        run = subprocess.run  # the compiler found on PATH, asked its version
        return run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
