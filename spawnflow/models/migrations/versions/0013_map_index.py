"""Dynamic task mapping: each task instance's map index (-1 unmapped), part of its
unique key with its run and task.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with (
        _keeping_rows_that_refer_to("task_instance"),
        op.batch_alter_table("task_instance") as batch,
    ):
        batch.add_column(sa.Column("map_index", sa.Integer(), nullable=False, server_default="-1"))
        batch.drop_constraint(op.f("uq_task_instance_dag_run_id_task_id"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_task_instance_dag_run_id_task_id_map_index"),
            ["dag_run_id", "task_id", "map_index"],
        )


def downgrade() -> None:
    # The old key has room for one instance per task and run: a mapped task keeps none
    # of its expanded instances (their XComs and state go with them, by the cascade).
    task_instance = sa.table("task_instance", sa.column("map_index", sa.Integer()))
    op.execute(task_instance.delete().where(task_instance.c.map_index >= 0))
    with (
        _keeping_rows_that_refer_to("task_instance"),
        op.batch_alter_table("task_instance") as batch,
    ):
        batch.drop_constraint(op.f("uq_task_instance_dag_run_id_task_id_map_index"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_task_instance_dag_run_id_task_id"), ["dag_run_id", "task_id"]
        )
        batch.drop_column("map_index")


@contextmanager
def _keeping_rows_that_refer_to(table: str) -> Iterator[None]:
    """SQLite changes a table's unique key by copying the table and dropping the old
    one, and with foreign keys on (spawnflow turns them on; the pragma cannot change
    inside the migration's transaction) dropping it deletes, by ON DELETE CASCADE, every
    row that refers to it: keep those rows in temporary tables and put them back."""
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        yield
        return
    inspector = sa.inspect(bind)
    referring = [
        name
        for name in inspector.get_table_names()
        if any(key["referred_table"] == table for key in inspector.get_foreign_keys(name))
    ]
    for name in referring:
        bind.exec_driver_sql(f'CREATE TEMP TABLE "_kept_{name}" AS SELECT * FROM "{name}"')
    yield
    for name in referring:
        bind.exec_driver_sql(f'INSERT INTO "{name}" SELECT * FROM "_kept_{name}"')
        bind.exec_driver_sql(f'DROP TABLE "_kept_{name}"')
