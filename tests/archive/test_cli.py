"""The operator's side of the archive, as processes: ``parley archive`` killed mid-pass
loses nothing; ``parley stats``; ``parley user export`` / ``delete``; a blob store that
refuses the credentials stops ``parley serve`` at start-up with a clear error."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from parley.archive.archiver import chat_key
from parley.archive.codec import decode
from parley.blobs.settings import BlobSettings
from parley.blobs.store import build_blob_store
from parley.crashpoints import KILLED
from parley.domain import MessageRole, MessageStatus, new_id, utcnow
from parley.store.database import Database
from parley.store.schema import Chat, Message, User
from tests.seaweed import S3Server
from tests.test_cli import parley

pytestmark = pytest.mark.slow

CHATS = 150
TURNS = 4


def _env(database_url: str, data_dir: Path, blobs: dict[str, Any]) -> dict[str, str]:
    env = {"PARLEY_DATABASE_URL": database_url, "PARLEY_DATA_DIR": str(data_dir)}
    env |= {f"PARLEY_BLOBS__{k.upper()}": str(v) for k, v in blobs.items()}
    return env


async def _seed(database_url: str, *, chats: int, email: str = "ada@example.com") -> str:
    """``chats`` chats of ``TURNS`` messages each, idle for two years, straight into the store."""
    db = Database(database_url)
    old = utcnow() - timedelta(days=730)
    user_id = new_id("user")
    async with db.transaction() as s:
        s.add(
            User(
                id=user_id,
                email=email,
                password_hash="x",
                tier="free",
                created_at=old,
                updated_at=old,
            )
        )
        await s.flush()
        for c in range(chats):
            chat_id = new_id("chat")
            s.add(
                Chat(
                    id=chat_id,
                    user_id=user_id,
                    title=f"chat {c}",
                    message_count=TURNS,
                    created_at=old,
                    updated_at=old,
                    last_activity_at=old,
                )
            )
            await s.flush()
            for seq in range(1, TURNS + 1):
                role = MessageRole.USER if seq % 2 else MessageRole.ASSISTANT
                s.add(
                    Message(
                        id=new_id("msg"),
                        user_id=user_id,
                        chat_id=chat_id,
                        seq=seq,
                        role=role,
                        content=f"{c}:{seq} " * 50,
                        status=MessageStatus.COMPLETED,
                        created_at=old,
                        updated_at=old,
                    )
                )
    await db.dispose()
    return user_id


async def _state(database_url: str) -> list[tuple[Chat, int]]:
    db = Database(database_url)
    async with db.transaction() as s:
        chats = list(await s.scalars(select(Chat)))
        rows = await s.execute(select(Message.chat_id, func.count()).group_by(Message.chat_id))
        counts = {chat_id: n for chat_id, n in rows}
    await db.dispose()
    return [(chat, counts.get(chat.id, 0)) for chat in chats]


async def _check_nothing_lost(database_url: str, blobs: dict[str, Any], data_dir: Path) -> int:
    """Every chat whole in the database, or archived with an object holding all of it."""
    store = build_blob_store(BlobSettings(**blobs), data_dir)
    archived = 0
    for chat, rows in await _state(database_url):
        if chat.archived_at is None:
            assert rows == TURNS, chat.id
            continue
        archived += 1
        assert rows == 0, chat.id
        assert chat.archive_key == chat_key(chat.user_id, chat.id)
        held = decode(await store.get(chat.archive_key), chat_id=chat.id, user_id=chat.user_id)
        assert [m.seq for m in held.messages] == list(range(1, TURNS + 1))
    return archived


async def _kill_once_archived(proc: subprocess.Popen[bytes], database_url: str, n: int) -> None:
    """SIGKILL ``proc`` as soon as ``n`` chats are archived: polled every 5 ms on one open
    database (a pass archives a chat in about a millisecond here; a slower poll let a
    whole pass of 150 end before the kill)."""
    db = Database(database_url)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the pass ended before it could be killed"
            async with db.transaction() as s:
                archived = await s.scalar(select(func.count()).where(Chat.archived_at.is_not(None)))
            if (archived or 0) >= n:
                proc.send_signal(signal.SIGKILL)
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"{n} chats were not archived within 60 s")
    finally:
        await db.dispose()


def test_a_pass_killed_at_any_moment_loses_nothing(
    database_url: str,
    blob_settings: dict[str, Any],
    tmp_path: Path,
) -> None:
    asyncio.run(_seed(database_url, chats=CHATS))
    env = _env(database_url, tmp_path, blob_settings)
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "parley", "archive", "--idle-days", "365"],
        env={**base, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    asyncio.run(_kill_once_archived(proc, database_url, 10))  # mid-pass: no cleanup at all
    proc.wait()

    partly = asyncio.run(_check_nothing_lost(database_url, blob_settings, tmp_path))
    assert 10 <= partly < CHATS
    r = parley("archive", "--idle-days", "365", env=env)
    assert r.returncode == 0, r.stderr
    assert f"archived {CHATS - partly} chats" in r.stdout
    assert asyncio.run(_check_nothing_lost(database_url, blob_settings, tmp_path)) == CHATS
    stats = json.loads(parley("stats", "--json", env=env).stdout)
    assert stats["archived_chats"] == stats["chats"] == CHATS
    assert stats["messages_in_database"] == 0 and stats["archived_bytes"] > 0


@pytest.mark.parametrize(
    ("point", "archived"), [("archive.written:10", 9), ("archive.marked:10", 10)]
)
def test_a_pass_that_dies_at_each_step_of_a_move_loses_nothing(
    database_url: str,
    blob_settings: dict[str, Any],
    tmp_path: Path,
    point: str,
    archived: int,
) -> None:
    """The kill aimed at its window (``parley.crashpoints``): the pass dies on the spot
    right after the 10th chat's object is written (not yet verified nor marked), or right
    after the 10th chat is marked archived. Either way every chat is whole somewhere, and
    the next pass archives the rest."""
    asyncio.run(_seed(database_url, chats=CHATS))
    env = _env(database_url, tmp_path, blob_settings)
    died = parley("archive", "--idle-days", "365", env={**env, "PARLEY_CRASH_AT": point})
    assert died.returncode == KILLED, died.stderr
    assert asyncio.run(_check_nothing_lost(database_url, blob_settings, tmp_path)) == archived
    r = parley("archive", "--idle-days", "365", env=env)
    assert r.returncode == 0, r.stderr
    assert f"archived {CHATS - archived} chats" in r.stdout
    assert asyncio.run(_check_nothing_lost(database_url, blob_settings, tmp_path)) == CHATS


def test_an_admin_exports_and_deletes_a_users_data(
    database_url: str,
    blob_settings: dict[str, Any],
    tmp_path: Path,
) -> None:
    user_id = asyncio.run(_seed(database_url, chats=3))
    asyncio.run(_seed(database_url, chats=1, email="bob@example.com"))
    env = _env(database_url, tmp_path, blob_settings)
    assert parley("archive", env=env).returncode == 0  # two years idle: all archived
    out = tmp_path / "ada.zip"

    r = parley("user", "export", "ada@example.com", "--out", str(out), env=env)

    assert r.returncode == 0, r.stderr
    assert "3 chats, 12 messages" in r.stdout
    document = json.loads(zipfile.ZipFile(out).read("parley-export.json"))
    assert {c["title"] for c in document["chats"]} == {"chat 0", "chat 1", "chat 2"}
    assert all(c["archived"] and len(c["messages"]) == TURNS for c in document["chats"])

    assert parley("user", "delete", "ada@example.com", env=env).returncode == 1  # no --yes
    r = parley("user", "delete", "ada@example.com", "--yes", env=env)
    assert r.returncode == 0 and "3 stored objects" in r.stdout, r.stderr
    store = build_blob_store(BlobSettings(**blob_settings), tmp_path)
    assert asyncio.run(store.list(f"users/{user_id}/")) == []
    users = parley("user", "list", env=env).stdout
    assert "ada@example.com" not in users and "bob@example.com" in users
    assert json.loads(parley("stats", "--json", env=env).stdout)["archived_chats"] == 1


def test_wrong_credentials_stop_serve_at_start_up(
    s3_server: S3Server,
    database_url: str,
    tmp_path: Path,
) -> None:
    blobs = s3_server.blob_settings(prefix="wrong", secret="not-the-secret")
    env = _env(database_url, tmp_path, blobs) | {"PARLEY_ENGINE": "fake", "PARLEY_PORT": "0"}
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    r = subprocess.run(
        [sys.executable, "-m", "parley", "serve"],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode != 0
    assert "blob store does not work" in r.stderr and "403" in r.stderr, r.stderr[-2000:]
