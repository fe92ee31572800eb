"""Events waiting for a Dag's custom partition mapper, which the Dag processor runs.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from spawnflow.models.base import Identifier

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

Moment = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "pending_asset_mapping",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("asset_event_id", sa.Integer(), nullable=False),
        sa.Column("partition_key", sa.String(250), nullable=False),
        sa.Column("created_at", Moment, nullable=False),
        sa.ForeignKeyConstraint(
            ["asset_event_id"],
            ["asset_event.id"],
            ondelete="CASCADE",
            name=op.f("fk_pending_asset_mapping_asset_event_id_asset_event"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_asset_mapping")),
    )
    op.create_index(op.f("ix_pending_asset_mapping_dag_id"), "pending_asset_mapping", ["dag_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_pending_asset_mapping_dag_id"), table_name="pending_asset_mapping")
    op.drop_table("pending_asset_mapping")
