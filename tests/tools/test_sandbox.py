"""``run_python`` in its bubblewrap sandbox (issue 43): code runs and its files stay in the
chat's scratch directory; and each way out fails as a clear tool outcome within its limit,
the host unharmed — the network, the server's data directory, /etc/shadow, a fork bomb,
10 GB written, an endless loop, 100 MB printed."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.tools.interface import ToolContext, ToolOutcome, ToolStatus
from parley.tools.sandbox import RunPython, unavailable
from parley.tools.settings import SandboxSettings

CONTEXT = ToolContext(user_id="user_ada", chat_id="chat_1", run_id="run_1")
LIMITS = {"cpu_seconds": 2, "wall_seconds": 6, "max_file_mb": 5, "max_output_chars": 5_000}


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory the sandbox's user may pass through (pytest's own are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="parley-sandbox-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def sandbox(data_dir: Path) -> RunPython:
    settings = SandboxSettings(**LIMITS)
    assert unavailable(settings, data_dir) is None, "`make test` installs bubblewrap"
    (data_dir / "parley.db").write_text("the server's own data")
    return RunPython(settings, data_dir)


async def run(sandbox: RunPython, code: str, context: ToolContext = CONTEXT) -> ToolOutcome:
    return await sandbox.call({"code": code}, context)


async def test_code_runs_and_its_files_stay_in_the_chats_scratch(
    sandbox: RunPython, data_dir: Path
) -> None:
    made = await run(sandbox, "open('notes.txt', 'w').write('heron'); print(6 * 7)")
    assert made.status is ToolStatus.OK and made.content.startswith("42")
    assert "notes.txt" in made.content
    again = await run(sandbox, "print(open('notes.txt').read())")
    assert again.content.startswith("heron")  # the chat's files stay between calls
    other = ToolContext(user_id="user_ada", chat_id="chat_2", run_id="run_2")
    fresh = await run(sandbox, "import os; print(os.listdir('.'))", other)
    assert fresh.content.startswith("[]")  # another chat: a fresh directory
    assert (data_dir / "sandbox" / "user_ada" / "chat_1" / "notes.txt").read_text() == "heron"


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "import socket; s = socket.create_connection(('1.1.1.1', 80), timeout=3)",
            "Network is unreachable",
        ),
        (
            "import urllib.request; urllib.request.urlopen('http://example.com', timeout=3)",
            "URLError",
        ),
        ("print(open('/etc/shadow').read())", "No such file"),
        ("import os; print(os.listdir('/'))", "'usr'"),  # all it sees
    ],
)
async def test_the_network_and_the_hosts_files_are_out_of_reach(
    sandbox: RunPython, data_dir: Path, code: str, said: str
) -> None:
    outcome = await run(sandbox, code)
    assert said in outcome.content, outcome.content
    assert str(data_dir) not in outcome.content


async def test_the_hosts_network_is_out_of_reach(sandbox: RunPython) -> None:
    """A server listening on the host's loopback: the sandbox's loopback is its own (and
    empty), and no other network is there."""
    accepted: list[bool] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        local = await run(
            sandbox,
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 3)\nprint('in')",
        )
        outside = await run(
            sandbox, "import socket\nsocket.create_connection(('93.184.216.34', 80), 3)"
        )
    finally:
        server.close()
    assert "Connection refused" in local.content and not local.content.startswith("in")
    assert accepted == []
    assert "Network is unreachable" in outside.content


async def test_the_servers_data_directory_is_not_there(sandbox: RunPython, data_dir: Path) -> None:
    outcome = await run(sandbox, f"print(open({str(data_dir / 'parley.db')!r}).read())")
    assert outcome.status is ToolStatus.ERROR and "No such file" in outcome.content
    assert "the server's own data" not in outcome.content


@pytest.mark.parametrize(
    ("code", "status", "said", "within"),
    [
        ("import os\nwhile True:\n    os.fork()", ToolStatus.ERROR, "", 8),  # a fork bomb
        (
            "f = open('big', 'wb')\nfor _ in range(10 * 1024):\n    f.write(b'x' * 1024 * 1024)",
            ToolStatus.ERROR,
            "a file larger than 5 MB",
            8,
        ),
        ("while True:\n    pass", ToolStatus.ERROR, "more than 2 s of CPU", 8),
        ("import time\ntime.sleep(60)", ToolStatus.TIMEOUT, "longer than 6 s", 8),
        ("print('x' * 100_000_000)", ToolStatus.ERROR, "printed more than 5000", 8),
        ("x = bytearray(4 * 1024 ** 3)", ToolStatus.ERROR, "MemoryError", 8),
    ],
    ids=["fork-bomb", "10-GB", "endless-loop", "sleep", "100-MB-print", "4-GB-memory"],
)
async def test_each_way_out_ends_as_a_clear_outcome_within_its_limit(
    sandbox: RunPython, data_dir: Path, code: str, status: ToolStatus, said: str, within: float
) -> None:
    # a user of its own: a fork bomb meets its own user's process limit, not another's
    user = f"user_{abs(hash(code)) % 10**6}"
    started = time.monotonic()
    outcome = await run(sandbox, code, ToolContext(user_id=user, chat_id="chat_1", run_id="r"))
    assert time.monotonic() - started < within
    assert outcome.status is status and said in outcome.content, outcome.content
    big = data_dir / "sandbox" / user / "chat_1" / "big"
    assert not big.exists() or big.stat().st_size <= 5 * 1024 * 1024  # the host unharmed
    assert os.getloadavg()  # (and this process alive to say so)


async def test_files_a_call_writes_come_back_and_links_out_are_never_followed(
    data_dir: Path,
) -> None:
    sandbox = RunPython(SandboxSettings(**LIMITS, answer_file_mb=1), data_dir)
    first = await run(sandbox, "open('kept.txt', 'w').write('old')")
    assert [f.name for f in first.files] == ["kept.txt"]
    code = (
        "import os\n"
        "open('report.csv', 'w').write('a,b\\n1,2\\n')\n"
        "open('big.bin', 'wb').write(b'x' * (2 * 1024 * 1024))\n"
        "os.symlink('/etc/passwd', 'passwd')\n"  # the host's, which the server could read
        "os.symlink('/proc/1/environ', 'environ')\n"
        "os.mkfifo('pipe')\n"
    )
    made = await run(sandbox, code)
    assert made.status is ToolStatus.OK, made
    assert {f.name: f.data for f in made.files} == {"report.csv": b"a,b\n1,2\n"}
    assert "not attached: big.bin, environ, passwd, pipe" in made.content, made.content
    unchanged = await run(sandbox, "print(open('kept.txt').read())")
    assert unchanged.files == ()  # read, not written: nothing comes back


@pytest.fixture
def few_files(data_dir: Path) -> RunPython:
    settings = SandboxSettings(**LIMITS, answer_files=2, answer_file_mb=1)
    return RunPython(settings, data_dir)


async def test_at_most_answer_files_come_back(few_files: RunPython) -> None:
    made = await run(few_files, "for i in range(4): open(f'f{i}.txt', 'w').write(str(i))")
    assert [f.name for f in made.files] == ["f0.txt", "f1.txt"]
    assert "not attached: f2.txt, f3.txt" in made.content


async def test_one_users_fork_bomb_leaves_another_users_code_running(sandbox: RunPython) -> None:
    bomber = ToolContext(user_id="user_bomber", chat_id="chat_1", run_id="run_1")
    other = ToolContext(user_id="user_other", chat_id="chat_1", run_id="run_2")
    assert sandbox.uid_of(bomber.user_id) != sandbox.uid_of(other.user_id)
    # forks up to its process limit, and every process then holds on to its place
    code = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
    code += "        time.sleep(30)"
    bomb = asyncio.create_task(run(sandbox, code, bomber))
    await asyncio.sleep(1.5)  # the bomb at its process limit now
    assert not bomb.done()
    fine = await run(sandbox, "print('fine')", other)
    assert fine.status is ToolStatus.OK and fine.content.startswith("fine"), fine.content
    await bomb
