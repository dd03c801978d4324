"""Migration 0015 both ways: a run's temperature column and a program's top_p, seed and stop
(in its input JSON, as 0014's code wrote them) become its ``sampling``, whole; going down
keeps the temperature."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from parley.domain import RunSource
from parley.engines.fake import FAKE_MODEL
from parley.engines.sampling import SamplingParams
from parley.store import users
from parley.store.database import Database
from parley.store.migrate import current_revision, upgrade
from parley.store.new_runs import NewRun, create_run
from parley.store.schema import Run
from tests.store.test_search import downgrade

OLD_INPUT = {
    "messages": [{"role": "user", "content": "hi"}],
    "stop": ["END", "."],
    "top_p": 0.9,
    "seed": 42,
}


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    yield database
    await database.dispose()


async def made_run(db: Database, user_id: str, sampling: SamplingParams) -> str:
    new = NewRun(
        user_id=user_id,
        chat_id=None,
        content="",
        model=FAKE_MODEL,
        tier="free",
        priority=0,
        max_tokens=16,
        sampling=sampling,
        idempotency_key=None,
        request_hash=None,
        source=RunSource.API,
        input=json.dumps({"messages": OLD_INPUT["messages"]}),
    )
    async with db.transaction() as s:
        return (await create_run(s, new)).id


async def test_the_sampling_migration_carries_every_parameter_over_and_back(db: Database) -> None:
    async with db.transaction() as s:
        user = await users.create_user(s, email="a@example.com", password_hash="x", tier="free")
    program = await made_run(db, user.id, SamplingParams(temperature=0.3))
    plain = await made_run(db, user.id, SamplingParams())
    try:
        await downgrade(db, "0014")
        assert await current_revision(db) == "0014"
        async with db.engine.begin() as conn:
            temperature = await conn.scalar(
                text("SELECT temperature FROM runs WHERE id = :id"), {"id": program}
            )
            assert temperature == pytest.approx(0.3)  # the way down kept it
            await conn.execute(  # a program's run as 0014's code wrote it
                text("UPDATE runs SET input = :input WHERE id = :id"),
                {"input": json.dumps(OLD_INPUT), "id": program},
            )
    finally:
        await upgrade(db)
    async with db.transaction() as s:
        carried = await s.get(Run, program)
        untouched = await s.get(Run, plain)
    assert carried is not None and untouched is not None
    want = SamplingParams(temperature=0.3, top_p=0.9, seed=42, stop=("END", "."))
    assert carried.sampling == want
    assert untouched.sampling == SamplingParams()
