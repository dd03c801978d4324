"""runs: ``sampling``, a run's sampling parameters whole (one JSON column)

``temperature`` was a column while a program's ``top_p``, ``seed`` and ``stop`` rode in its
``input`` JSON; now all of them are ``runs.sampling`` (``engines.sampling.SamplingParams``,
only what is set), and ``temperature`` goes. Existing runs are carried over in batches.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 22:00:00
"""

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 1000
runs = sa.table(
    "runs",
    sa.column("id", sa.String),
    sa.column("temperature", sa.Float),
    sa.column("input", sa.Text),
    sa.column("sampling", sa.Text),
)


def sampling_of(temperature: float | None, input_json: str | None) -> str:
    given: dict[str, Any] = json.loads(input_json) if input_json else {}
    found = {
        "temperature": temperature,
        "top_p": given.get("top_p"),
        "seed": given.get("seed"),
        "stop": given.get("stop") or None,
    }
    return json.dumps({k: v for k, v in found.items() if v is not None}, separators=(",", ":"))


def upgrade() -> None:
    op.add_column("runs", sa.Column("sampling", sa.Text(), nullable=False, server_default="{}"))
    bind = op.get_bind()
    carried = sa.or_(runs.c.temperature.is_not(None), runs.c.input.is_not(None))
    last = ""
    while True:
        rows = bind.execute(
            sa.select(runs.c.id, runs.c.temperature, runs.c.input)
            .where(carried, runs.c.id > last)
            .order_by(runs.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            break
        for run_id, temperature, input_json in rows:
            bind.execute(
                runs.update()
                .where(runs.c.id == run_id)
                .values(sampling=sampling_of(temperature, input_json))
            )
        last = rows[-1][0]
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("temperature")


def downgrade() -> None:
    op.add_column("runs", sa.Column("temperature", sa.Double(), nullable=True))
    bind = op.get_bind()
    for run_id, sampling in bind.execute(sa.select(runs.c.id, runs.c.sampling)).all():
        temperature = json.loads(sampling or "{}").get("temperature")
        if temperature is not None:
            bind.execute(runs.update().where(runs.c.id == run_id).values(temperature=temperature))
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("sampling")
