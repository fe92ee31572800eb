"""Assets, their events, pending asset-driven runs with their key logs, wake requests.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from spawnflow.models.base import Identifier

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Moment = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "asset",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uri", sa.String(1500), nullable=False),
        sa.Column("uri_hash", sa.String(64), nullable=False),
        sa.Column("name", sa.String(1500), nullable=False),
        sa.Column("asset_group", sa.String(250), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("created_at", Moment, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asset")),
        sa.UniqueConstraint("uri_hash", name=op.f("uq_asset_uri_hash")),
    )
    op.create_table(
        "dag_asset_reference",
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.ForeignKeyConstraint(
            ["dag_id"],
            ["dag.dag_id"],
            ondelete="CASCADE",
            name=op.f("fk_dag_asset_reference_dag_id_dag"),
        ),
        sa.ForeignKeyConstraint(
            ["asset_id"],
            ["asset.id"],
            ondelete="CASCADE",
            name=op.f("fk_dag_asset_reference_asset_id_asset"),
        ),
        sa.PrimaryKeyConstraint("dag_id", "asset_id", "role", name=op.f("pk_dag_asset_reference")),
    )
    op.create_index(op.f("ix_dag_asset_reference_asset_id"), "dag_asset_reference", ["asset_id"])
    op.create_table(
        "asset_event",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("partition_key", sa.String(250), nullable=True),
        sa.Column("extra", sa.Text(), nullable=False),
        sa.Column("source_dag_id", Identifier, nullable=True),
        sa.Column("source_run_id", Identifier, nullable=True),
        sa.Column("source_task_id", Identifier, nullable=True),
        sa.Column("timestamp", Moment, nullable=False),
        sa.ForeignKeyConstraint(
            ["asset_id"],
            ["asset.id"],
            ondelete="CASCADE",
            name=op.f("fk_asset_event_asset_id_asset"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asset_event")),
    )
    op.create_index(op.f("ix_asset_event_asset_id"), "asset_event", ["asset_id"])
    op.create_index(op.f("ix_asset_event_timestamp"), "asset_event", ["timestamp"])
    op.create_table(
        "pending_asset_run",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("partition_key", sa.String(250), nullable=False),
        sa.Column("created_at", Moment, nullable=False),
        sa.ForeignKeyConstraint(
            ["dag_id"],
            ["dag.dag_id"],
            ondelete="CASCADE",
            name=op.f("fk_pending_asset_run_dag_id_dag"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_asset_run")),
        sa.UniqueConstraint(
            "dag_id", "partition_key", name=op.f("uq_pending_asset_run_dag_id_partition_key")
        ),
    )
    op.create_table(
        "pending_asset_event",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("pending_run_id", sa.Integer(), nullable=False),
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("partition_key", sa.String(250), nullable=False),
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("asset_event_id", sa.Integer(), nullable=False),
        sa.Column("created_at", Moment, nullable=False),
        sa.ForeignKeyConstraint(
            ["asset_event_id"],
            ["asset_event.id"],
            ondelete="CASCADE",
            name=op.f("fk_pending_asset_event_asset_event_id_asset_event"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_asset_event")),
    )
    op.create_index(
        op.f("ix_pending_asset_event_pending_run_id"), "pending_asset_event", ["pending_run_id"]
    )
    op.create_table(
        "asset_wake_request",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("pending_run_id", sa.Integer(), nullable=True),
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("reason", sa.String(50), nullable=False),
        sa.Column("created_at", Moment, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asset_wake_request")),
    )
    op.create_table(
        "dag_run_asset_event",
        sa.Column("dag_run_id", sa.Integer(), nullable=False),
        sa.Column("asset_event_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            ondelete="CASCADE",
            name=op.f("fk_dag_run_asset_event_dag_run_id_dag_run"),
        ),
        sa.ForeignKeyConstraint(
            ["asset_event_id"],
            ["asset_event.id"],
            ondelete="CASCADE",
            name=op.f("fk_dag_run_asset_event_asset_event_id_asset_event"),
        ),
        sa.PrimaryKeyConstraint(
            "dag_run_id", "asset_event_id", name=op.f("pk_dag_run_asset_event")
        ),
    )
    with op.batch_alter_table("dag_run") as batch:
        batch.add_column(sa.Column("partition_key", sa.String(250), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dag_run") as batch:
        batch.drop_column("partition_key")
    for table in (
        "dag_run_asset_event",
        "asset_wake_request",
        "pending_asset_event",
        "pending_asset_run",
        "asset_event",
        "dag_asset_reference",
        "asset",
    ):
        op.drop_table(table)
