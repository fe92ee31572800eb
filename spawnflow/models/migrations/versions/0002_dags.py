"""Dags, serialized Dags, import errors and Dag file parse statistics.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from spawnflow.models.base import Identifier

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "dag",
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("fileloc", sa.String(1000), nullable=False),
        sa.Column("is_paused", sa.Boolean(), nullable=False),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("schedule", sa.String(100), nullable=False),
        sa.Column("tags", sa.Text(), nullable=False),
        sa.Column("max_active_runs", sa.Integer(), nullable=False),
        sa.Column("max_active_tasks", sa.Integer(), nullable=False),
        sa.Column("last_parsed_time", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("dag_id", name=op.f("pk_dag")),
    )
    op.create_index(op.f("ix_dag_is_active"), "dag", ["is_active"])
    op.create_table(
        "serialized_dag",
        sa.Column("dag_id", Identifier, nullable=False),
        sa.Column("data", LongText, nullable=False),
        sa.Column("dag_hash", sa.String(64), nullable=False),
        sa.Column("last_updated", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dag_id"],
            ["dag.dag_id"],
            name=op.f("fk_serialized_dag_dag_id_dag"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("dag_id", name=op.f("pk_serialized_dag")),
    )
    op.create_table(
        "import_error",
        sa.Column("file_key", sa.String(64), nullable=False),
        sa.Column("fileloc", sa.String(1000), nullable=False),
        sa.Column("error", LongText, nullable=False),
        sa.Column("timestamp", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("file_key", name=op.f("pk_import_error")),
    )
    op.create_table(
        "dag_file",
        sa.Column("file_key", sa.String(64), nullable=False),
        sa.Column("fileloc", sa.String(1000), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("last_parsed", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration", sa.Float(), nullable=False),
        sa.Column("dag_count", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.PrimaryKeyConstraint("file_key", name=op.f("pk_dag_file")),
    )


def downgrade() -> None:
    op.drop_table("dag_file")
    op.drop_table("import_error")
    op.drop_table("serialized_dag")
    op.drop_index(op.f("ix_dag_is_active"), table_name="dag")
    op.drop_table("dag")
