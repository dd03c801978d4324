"""What one statement costs the client in CPU on parley's Postgres stack (issue 48's floor).

    python bench/statement_floor.py [--statements 3000]

A durable answer is at least three statements (its run stored, claimed, ended). This times
one conditional ``UPDATE … RETURNING`` — the shape of the claim and the end — issued on its
own as parley's ``Database.alone()`` issues it (a pooled SQLAlchemy connection in
autocommit, a Core statement), and the same ``UPDATE`` through asyncpg's ``fetchrow`` on a
connection from the same pool: CPU of this process (``time.process_time``) and wall time per
statement, side by side in one run, on a table of its own made and dropped here.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Awaitable, Callable

from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, insert, update
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from stacks import loop_runner

URL = os.environ.get(
    "PARLEY_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
ROWS = 1000


async def timed(label: str, one: Callable[[int], Awaitable[None]], n: int) -> None:
    for i in range(n // 10):  # warm: the pool, prepared statements, caches
        await one(i)
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        await one(i)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"| {label} | {cpu / n * 1e6:.0f} | {wall / n * 1e6:.0f} |")


async def measure(engine: AsyncEngine, n: int) -> None:
    table = Table(
        f"statement_floor_{uuid.uuid4().hex[:8]}",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("status", String),
        Column("n", Integer),
    )
    async with engine.begin() as c:
        await c.run_sync(table.create)
        await c.execute(insert(table), [{"id": i, "status": "q", "n": 0} for i in range(ROWS)])
    claim = (  # built once, its id bound per call (as run_records' claim)
        update(table)
        .where(table.c.id == bindparam("run_id"))
        .values(n=table.c.n + 1)
        .returning(table.c.id, table.c.status)
    )
    raw = f"UPDATE {table.name} SET n = n + 1 WHERE id = $1 RETURNING id, status"  # noqa: S608

    async def alone(i: int) -> None:
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            (await conn.execute(claim, {"run_id": i % ROWS})).first()

    async def driver(i: int) -> None:
        async with engine.connect() as conn:
            raw_conn = await conn.get_raw_connection()
            await raw_conn.driver_connection.fetchrow(raw, i % ROWS)  # type: ignore[union-attr]

    print("| one UPDATE … RETURNING | client CPU µs | wall µs |\n|---|---|---|")
    try:
        await timed("SQLAlchemy Core, autocommit (as `Database.alone()`)", alone, n)
        await timed("asyncpg `fetchrow`, the same pool", driver, n)
    finally:
        async with engine.begin() as c:
            await c.run_sync(table.drop)


async def main_async(n: int) -> None:
    engine = create_async_engine(URL, pool_size=4)
    try:
        await measure(engine, n)
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--statements", type=int, default=3000)
    loop_runner()(main_async(parser.parse_args().statements))


if __name__ == "__main__":
    main()
