"""XCom rows that point at a value kept by an XCom backend.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    # Batch mode: SQLite cannot change a column's nullability in place.
    with op.batch_alter_table("xcom") as batch:
        batch.add_column(sa.Column("reference", sa.Text(), nullable=True))
        batch.alter_column("value", existing_type=LongText, nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("xcom") as batch:
        batch.drop_column("reference")
        batch.alter_column("value", existing_type=LongText, nullable=False)
