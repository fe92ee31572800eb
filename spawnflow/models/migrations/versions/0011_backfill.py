"""Backfills: the ``backfill`` table, and ``dag_run.backfill_id`` for the runs it made.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

from spawnflow.models.base import Identifier

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

Moment = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "backfill",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("from_date", Moment, nullable=False),
        sa.Column("to_date", Moment, nullable=False),
        sa.Column("reprocess_behavior", sa.String(20), nullable=False),
        sa.Column("max_active_runs", sa.Integer(), nullable=False),
        sa.Column("conf", sa.Text(), nullable=False),
        sa.Column("created_at", Moment, nullable=False),
        sa.Column("completed_at", Moment, nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_id"], ["dag.dag_id"], name=op.f("fk_backfill_dag_id_dag"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_backfill")),
    )
    op.create_index(op.f("ix_backfill_dag_id"), "backfill", ["dag_id"])
    # Batch mode: SQLite cannot add a foreign key to a table in place.
    with op.batch_alter_table("dag_run") as batch:
        batch.add_column(sa.Column("backfill_id", sa.Integer(), nullable=True))
        batch.create_index(op.f("ix_dag_run_backfill_id"), ["backfill_id"])
        batch.create_foreign_key(
            op.f("fk_dag_run_backfill_id_backfill"), "backfill", ["backfill_id"], ["id"],
            ondelete="SET NULL",
        )  # fmt: skip


def downgrade() -> None:
    with op.batch_alter_table("dag_run") as batch:
        batch.drop_constraint(op.f("fk_dag_run_backfill_id_backfill"), type_="foreignkey")
        batch.drop_index(op.f("ix_dag_run_backfill_id"))
        batch.drop_column("backfill_id")
    op.drop_table("backfill")  # with its index (MySQL keeps one a foreign key needs)
