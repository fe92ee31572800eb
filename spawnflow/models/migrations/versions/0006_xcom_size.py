"""XCom rows record the size of the value's JSON text, so that a value read back from
a backend can be checked against what was pushed.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Batch mode: SQLite cannot alter a table in place. Rows written before keep NULL:
    # their size is not known, and is not checked.
    with op.batch_alter_table("xcom") as batch:
        batch.add_column(sa.Column("size", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("xcom") as batch:
        batch.drop_column("size")
