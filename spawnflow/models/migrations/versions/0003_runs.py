"""Dag runs, task instances, XComs and Variables.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from spawnflow.models.base import Identifier

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
Moment = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "dag_run",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("run_id", Identifier, nullable=False),
        sa.Column("run_type", sa.String(20), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("logical_date", Moment, nullable=False),
        sa.Column("data_interval_start", Moment, nullable=True),
        sa.Column("data_interval_end", Moment, nullable=True),
        sa.Column("conf", sa.Text(), nullable=False),
        sa.Column("created_at", Moment, nullable=False),
        sa.Column("start_date", Moment, nullable=True),
        sa.Column("end_date", Moment, nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_id"], ["dag.dag_id"], name=op.f("fk_dag_run_dag_id_dag"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dag_run")),
        sa.UniqueConstraint("dag_id", "run_id", name=op.f("uq_dag_run_dag_id_run_id")),
    )
    op.create_index(op.f("ix_dag_run_state"), "dag_run", ["state"])
    op.create_table(
        "task_instance",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dag_run_id", sa.Integer(), nullable=False),
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("task_id", Identifier, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("max_tries", sa.Integer(), nullable=False),
        sa.Column("queued_at", Moment, nullable=True),
        sa.Column("start_date", Moment, nullable=True),
        sa.Column("end_date", Moment, nullable=True),
        sa.Column("duration", sa.Float(), nullable=True),
        sa.Column("next_try_at", Moment, nullable=True),
        sa.Column("hostname", sa.String(255), nullable=True),
        sa.Column("worker_pid", sa.Integer(), nullable=True),
        sa.Column("scheduler_job_id", sa.Integer(), nullable=True),
        sa.Column("task_pid", sa.Integer(), nullable=True),
        sa.Column("last_heartbeat", Moment, nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["dag_run_id"],
            ["dag_run.id"],
            name=op.f("fk_task_instance_dag_run_id_dag_run"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_instance")),
        sa.UniqueConstraint(
            "dag_run_id", "task_id", name=op.f("uq_task_instance_dag_run_id_task_id")
        ),
    )
    op.create_index(op.f("ix_task_instance_dag_run_id"), "task_instance", ["dag_run_id"])
    op.create_index(op.f("ix_task_instance_dag_id"), "task_instance", ["dag_id"])
    op.create_index(op.f("ix_task_instance_state"), "task_instance", ["state"])
    op.create_table(
        "xcom",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_instance_id", sa.Integer(), nullable=False),
        sa.Column("key", Identifier, nullable=False),
        sa.Column("value", LongText, nullable=False),
        sa.Column("created_at", Moment, nullable=False),
        sa.ForeignKeyConstraint(
            ["task_instance_id"],
            ["task_instance.id"],
            name=op.f("fk_xcom_task_instance_id_task_instance"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_xcom")),
        sa.UniqueConstraint("task_instance_id", "key", name=op.f("uq_xcom_task_instance_id_key")),
    )
    op.create_table(
        "variable",
        sa.Column("key", Identifier, nullable=False),
        sa.Column("value", LongText, nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_variable")),
    )


def downgrade() -> None:
    op.drop_table("variable")
    op.drop_table("xcom")
    op.drop_table("task_instance")
    op.drop_table("dag_run")
