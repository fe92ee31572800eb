"""Deferred task instances, triggers, and the state stores of tasks and assets.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from spawnflow.models.base import Identifier
from spawnflow.models.dag import LongText

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

Moment = sa.DateTime(timezone=True)


def _state_table(name: str, owner: str, referred: str) -> None:
    op.create_table(
        name,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column(owner, sa.Integer(), nullable=False),
        sa.Column("key", Identifier, nullable=False),
        sa.Column("value", LongText, nullable=True),
        sa.Column("reference", sa.Text(), nullable=True),
        sa.Column("updated_at", Moment, nullable=False),
        sa.ForeignKeyConstraint(
            [owner],
            [f"{referred}.id"],
            ondelete="CASCADE",
            name=op.f(f"fk_{name}_{owner}_{referred}"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{name}")),
        sa.UniqueConstraint(owner, "key", name=op.f(f"uq_{name}_{owner}_key")),
    )


def upgrade() -> None:
    op.create_table(
        "trigger",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("classpath", sa.String(1000), nullable=False),
        sa.Column("kwargs", LongText, nullable=False),
        sa.Column("created_at", Moment, nullable=False),
        sa.Column("triggerer_id", sa.Integer(), nullable=True),
        sa.Column("asset_id", sa.Integer(), nullable=True),
        sa.Column("watcher_name", Identifier, nullable=True),
        sa.ForeignKeyConstraint(
            ["asset_id"], ["asset.id"], ondelete="CASCADE", name=op.f("fk_trigger_asset_id_asset")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trigger")),
        sa.UniqueConstraint(
            "asset_id", "watcher_name", name=op.f("uq_trigger_asset_id_watcher_name")
        ),
        sqlite_autoincrement=True,  # ids are never given again (see models.triggers)
    )
    op.create_index(op.f("ix_trigger_triggerer_id"), "trigger", ["triggerer_id"])
    op.create_table(
        "dag_asset_watcher",
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("asset_id", sa.Integer(), nullable=False),
        sa.Column("name", Identifier, nullable=False),
        sa.Column("classpath", sa.String(1000), nullable=False),
        sa.Column("kwargs", LongText, nullable=False),
        sa.ForeignKeyConstraint(
            ["asset_id"],
            ["asset.id"],
            ondelete="CASCADE",
            name=op.f("fk_dag_asset_watcher_asset_id_asset"),
        ),
        sa.ForeignKeyConstraint(
            ["dag_id"],
            ["dag.dag_id"],
            ondelete="CASCADE",
            name=op.f("fk_dag_asset_watcher_dag_id_dag"),
        ),
        sa.PrimaryKeyConstraint("dag_id", "asset_id", "name", name=op.f("pk_dag_asset_watcher")),
    )
    _state_table("task_state", "task_instance_id", "task_instance")
    _state_table("asset_state", "asset_id", "asset")
    with op.batch_alter_table("asset_event") as batch:
        batch.add_column(sa.Column("trigger_event", sa.String(32), nullable=True))
        batch.create_unique_constraint(op.f("uq_asset_event_trigger_event"), ["trigger_event"])
    with op.batch_alter_table("task_instance") as batch:
        batch.add_column(sa.Column("trigger_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("next_method", sa.String(250), nullable=True))
        batch.add_column(sa.Column("next_kwargs", LongText, nullable=True))
        batch.add_column(sa.Column("trigger_timeout", Moment, nullable=True))
        batch.create_index(op.f("ix_task_instance_trigger_id"), ["trigger_id"])


def downgrade() -> None:
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_index(op.f("ix_task_instance_trigger_id"))
        for column in ("trigger_timeout", "next_kwargs", "next_method", "trigger_id"):
            batch.drop_column(column)
    with op.batch_alter_table("asset_event") as batch:
        batch.drop_constraint(op.f("uq_asset_event_trigger_event"), type_="unique")
        batch.drop_column("trigger_event")
    op.drop_table("dag_asset_watcher")
    op.drop_table("asset_state")
    op.drop_table("task_state")
    op.drop_index(op.f("ix_trigger_triggerer_id"), table_name="trigger")
    op.drop_table("trigger")
