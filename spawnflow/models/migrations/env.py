"""Alembic's environment: runs migrations on the connection spawnflow hands it."""

from alembic import context

from spawnflow.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("spawnflow migrations run through `spawnflow db migrate`, not offline")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
