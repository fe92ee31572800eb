"""Task instances count their updates (``row_version``), so that the scheduler can tell
a run in which nothing changed from one it has to look at again.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Batch mode: SQLite cannot alter a table in place. Existing rows start at 0.
    with op.batch_alter_table("task_instance") as batch:
        batch.add_column(sa.Column("row_version", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("task_instance") as batch:
        batch.drop_column("row_version")
