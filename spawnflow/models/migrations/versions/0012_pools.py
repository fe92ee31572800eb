"""Pools: the ``pool`` table with ``default_pool``, and each task instance's pool,
pool slots and priority weight.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

from spawnflow.models.base import Identifier

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pool = op.create_table(
        "pool",
        sa.Column("pool", Identifier, nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("include_deferred", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("pool", name=op.f("pk_pool")),
    )
    op.bulk_insert(
        pool,
        [{"pool": "default_pool", "slots": 128, "description": "Default pool",
          "include_deferred": False}],
    )  # fmt: skip
    with op.batch_alter_table("task_instance") as batch:
        batch.add_column(
            sa.Column("pool", Identifier, nullable=False, server_default="default_pool")
        )
        batch.add_column(sa.Column("pool_slots", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(
            sa.Column("priority_weight", sa.Integer(), nullable=False, server_default="1")
        )
        batch.create_index(op.f("ix_task_instance_pool"), ["pool"])


def downgrade() -> None:
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_index(op.f("ix_task_instance_pool"))
        batch.drop_column("priority_weight")
        batch.drop_column("pool_slots")
        batch.drop_column("pool")
    op.drop_table("pool")
