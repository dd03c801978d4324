"""Search across a user's chats (issue 21): latency of ``GET /api/search``'s query.

    python bench/search.py [--backends sqlite,postgres] [--total 10000000]
                           [--user-messages 100000] [--user-chats 1000] [--repeats 40]
                           [--sqlite-path build/bench/search.db]
                           [--postgres postgresql://postgres@127.0.0.1/parley_bench_search]
                           [--reuse]

Seeds one user with ``--user-chats`` chats and ``--user-messages`` messages, and other
users (100 chats of 100 messages each) up to ``--total`` rows in the messages table, on a
SQLite file and on a Postgres database of its own (dropped and made again), both migrated to
head (the search indexes of migrations 0008, 0011 and 0012). Every message is 20 words drawn from
one 5,000-word vocabulary of made-up words by a Zipf law (rank ``floor(5000 ** u)``, u
uniform), the same for every user; chat titles are two words of a separate 300-word title
vocabulary. SQLite: ``executemany`` in transactions of 100,000 rows, the FTS5 triggers on.
Postgres: ``INSERT ... SELECT generate_series`` a million rows at a time, the messages' GIN
index dropped for the load and built again after it.

Then the store's query function itself (``store.chat_search.search_chats``: ranked page of
20 with snippets, as the route calls it; no HTTP) is timed ``--repeats`` times for each of
four queries, after one warm-up each: a common word (rank 20: in ~10 % of messages), a rare
word (rank 3,000), two words (ranks 40 and 60, both must match) and a title word. It prints
p50/p95 per query and over all of a database's queries, and p95 against the goal (50 ms).
``--reuse`` keeps the seeded databases and only times the queries.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from parley.store.chat_search import search_chats
from parley.store.database import Database
from parley.store.migrate import upgrade
from parley.store.pages import Cursors

GOAL_MS = 50.0
VOCAB = 5000
WORDS_PER_MESSAGE = 20
OTHER_CHATS, OTHER_MESSAGES = 100, 100  # per other user, per other chat
BATCH = 100_000
PG_BATCH = 1_000_000
TARGET = "usr_" + "f" * 24
PG_INDEX = "ix_messages_user_content_tsv"  # migration 0012's, dropped for the load
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def vocabulary(n: int, seed: int, prefix: str = "") -> list[str]:
    """``n`` distinct made-up words (3 syllables: no English stop word, none alike)."""
    rng, words = random.Random(seed), dict[str, None]()
    while len(words) < n:
        words[prefix + "".join(rng.choice(_SYLLABLES) for _ in range(3))] = None
    return list(words)


WORDS = vocabulary(VOCAB, 1)
TITLE_WORDS = vocabulary(300, 2, prefix="q")
QUERIES = {
    "common word": WORDS[19],
    "rare word": WORDS[2999],
    "two words": f"{WORDS[39]} {WORDS[59]}",
    "title word": TITLE_WORDS[7919 % 300],  # the title of a user's chat 1, 301, 601...
}


def zipf_word(rng: random.Random, words: list[str]) -> str:
    return words[min(int(len(words) ** rng.random()), len(words)) - 1]


def content(rng: random.Random) -> str:
    return " ".join(zipf_word(rng, WORDS) for _ in range(WORDS_PER_MESSAGE))


def layout(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(user id, chats, messages per chat) of every user: the others, then the target."""
    others = max(0, args.total - args.user_messages) // (OTHER_CHATS * OTHER_MESSAGES)
    users = [(f"usr_{u:024x}", OTHER_CHATS, OTHER_MESSAGES) for u in range(others)]
    return [*users, (TARGET, args.user_chats, args.user_messages // args.user_chats)]


# ---------------------------------------------------------------- SQLite


def seed_sqlite(path: Path, args: argparse.Namespace) -> None:
    conn = sqlite3.connect(path)
    conn.executescript("PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;")
    rng, now, n = random.Random(21), "2026-01-01 00:00:00.000000", 0
    rows: list[tuple[Any, ...]] = []
    for user_id, n_chats, per_chat in layout(args):
        conn.execute(
            "INSERT INTO users VALUES (?, ?, 'x', 'free', ?, ?)",
            (user_id, user_id + "@bench", now, now),
        )
        for c in range(n_chats):
            chat_id = f"chat_{user_id[4:]}{c:08x}"
            title = f"{TITLE_WORDS[c * 7919 % 300]} {TITLE_WORDS[c * 104729 % 300]}"
            conn.execute(
                "INSERT INTO chats (id, user_id, title, message_count, created_at, updated_at,"
                " last_activity_at, summary_through_seq) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                (chat_id, user_id, title, per_chat, now, now, now),
            )
            for seq in range(1, per_chat + 1):
                at = f"2026-01-01 00:00:00.{n % 1000000:06d}"
                role = "user" if seq % 2 else "assistant"
                rows.append((f"msg_{n:036x}", user_id, chat_id, seq, role, content(rng), at))
                n += 1
            if len(rows) >= BATCH:
                _sqlite_flush(conn, rows)
    _sqlite_flush(conn, rows)
    conn.close()


def _sqlite_flush(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    conn.executemany(
        "INSERT INTO messages (id, user_id, chat_id, seq, role, content, status, created_at,"
        " updated_at) VALUES (?, ?, ?, ?, ?, ?, 'completed', ?, ?6)",
        rows,
    )
    conn.commit()
    rows.clear()


# ---------------------------------------------------------------- Postgres

_PG_MESSAGES = """
INSERT INTO messages (id, user_id, chat_id, seq, role, content, status, created_at, updated_at)
SELECT 'msg_' || lpad(to_hex(:base + g), 36, '0'), :user_id,
       :prefix || lpad(to_hex(g / :per_chat), 8, '0'),
       g % :per_chat + 1, CASE WHEN g % 2 = 0 THEN 'user' ELSE 'assistant' END,
       array_to_string(ARRAY(SELECT v.w[least(floor(power(:vocab, random()))::int, :vocab)]
                             FROM generate_series(1, :words + 0 * g)), ' '),
       'completed', now() - (:base + g) * interval '1 microsecond',
       now() - (:base + g) * interval '1 microsecond'
FROM generate_series(:lo, :hi - 1) AS g, (SELECT CAST(:vocab_words AS text[]) AS w) AS v
"""


async def seed_postgres(url: str, args: argparse.Namespace) -> None:
    admin = create_async_engine(url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    name = url.rsplit("/", 1)[1]
    async with admin.connect() as conn:
        await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    await admin.dispose()
    db = Database(url)
    await upgrade(db)
    await db.dispose()
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text(f"DROP INDEX {PG_INDEX}"))
    base = 0
    for user_id, n_chats, per_chat in layout(args):
        await _pg_user(engine, user_id, n_chats, per_chat, base)
        base += n_chats * per_chat
    async with engine.begin() as conn:
        await conn.execute(text("SET maintenance_work_mem = '1GB'"))
        await conn.execute(
            text(f"CREATE INDEX {PG_INDEX} ON messages USING gin (user_id, content_tsv)")
        )
        await conn.execute(text("ANALYZE"))
    await engine.dispose()


async def _pg_user(engine: Any, user_id: str, n_chats: int, per_chat: int, base: int) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO users VALUES (:u, :e, 'x', 'free', now(), now())"),
            {"u": user_id, "e": user_id + "@bench"},
        )
        await conn.execute(
            text(
                "INSERT INTO chats (id, user_id, title, message_count, created_at, updated_at,"
                " last_activity_at, summary_through_seq) SELECT :p || lpad(to_hex(c), 8, '0'),"
                " :u, t.w[1 + (c * 7919) % 300] || ' ' || t.w[1 + (c * 104729) % 300], :n,"
                " now(), now(), now(), 0 FROM generate_series(0, :chats - 1) AS c,"
                " (SELECT CAST(:t AS text[]) AS w) AS t"
            ),
            {
                "u": user_id,
                "p": "chat_" + user_id[4:],
                "t": TITLE_WORDS,
                "n": per_chat,
                "chats": n_chats,
            },
        )
    total = n_chats * per_chat
    for lo in range(0, total, PG_BATCH):
        async with engine.begin() as conn:
            await conn.execute(
                text(_PG_MESSAGES),
                {"base": base, "user_id": user_id, "prefix": "chat_" + user_id[4:],
                 "per_chat": per_chat, "vocab": VOCAB, "words": WORDS_PER_MESSAGE,
                 "lo": lo, "hi": min(total, lo + PG_BATCH), "vocab_words": WORDS},
            )  # fmt: skip


# ---------------------------------------------------------------- timing


async def time_queries(url: str, repeats: int) -> dict[str, list[float]]:
    db, cursors = Database(url), Cursors("bench")
    timings: dict[str, list[float]] = {}
    try:
        for label, query in QUERIES.items():
            runs: list[float] = []
            for i in range(repeats + 1):
                start = time.perf_counter()
                async with db.transaction() as s:
                    page = await search_chats(
                        s, user_id=TARGET, query=query, limit=20, cursor=None, cursors=cursors
                    )
                if i:  # the first: a warm-up
                    runs.append((time.perf_counter() - start) * 1000)
            assert page.items, f"{label}: nothing found"
            timings[label] = runs
    finally:
        await db.dispose()
    return timings


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)]


def report(backend: str, timings: dict[str, list[float]], rows: int) -> None:
    print(f"\n{backend}: {rows:,} messages in the table")
    print(f"  {'query':<12} {'p50 ms':>8} {'p95 ms':>8}")
    for label, runs in timings.items():
        print(f"  {label:<12} {statistics.median(runs):8.1f} {pct(runs, 95):8.1f}")
    every = [t for runs in timings.values() for t in runs]
    p95 = pct(every, 95)
    print(f"  {'all':<12} {statistics.median(every):8.1f} {p95:8.1f}")
    print(f"  p95 / goal ({GOAL_MS:.0f} ms): {p95 / GOAL_MS:.2f}")


async def count(url: str) -> int:
    engine = create_async_engine(url)
    async with engine.connect() as conn:
        rows = int((await conn.execute(text("SELECT count(*) FROM messages"))).scalar_one())
    await engine.dispose()
    return rows


async def bench_backend(backend: str, args: argparse.Namespace) -> None:
    if backend == "sqlite":
        path = Path(args.sqlite_path)
        url = f"sqlite+aiosqlite:///{path}"
        if not args.reuse:
            path.parent.mkdir(parents=True, exist_ok=True)
            for stale in path.parent.glob(path.name + "*"):
                stale.unlink()
            db = Database(url)
            await upgrade(db)
            await db.dispose()
            started = time.perf_counter()
            await asyncio.to_thread(seed_sqlite, path, args)
            print(f"sqlite seeded in {time.perf_counter() - started:.0f} s", flush=True)
    else:
        url = args.postgres.replace("postgresql://", "postgresql+asyncpg://", 1)
        if not args.reuse:
            started = time.perf_counter()
            await seed_postgres(url, args)
            print(f"postgres seeded in {time.perf_counter() - started:.0f} s", flush=True)
    report(backend, await time_queries(url, args.repeats), await count(url))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--total", type=int, default=10_000_000)
    parser.add_argument("--user-messages", type=int, default=100_000)
    parser.add_argument("--user-chats", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--sqlite-path", default="build/bench/search.db")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1/parley_bench_search")
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    for backend in args.backends.split(","):
        asyncio.run(bench_backend(backend, args))


if __name__ == "__main__":
    main()
