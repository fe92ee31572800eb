"""The migrations create exactly the tables the models describe, on every database."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from spawnflow.bootstrap import orm
from spawnflow.models import Base, schema


def test_migrations_match_the_models(migrated_database, database_url):
    with orm.engine(database_url).connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert differences == []


def test_reset_drops_and_recreates_every_table(migrated_database, database_url):
    from sqlalchemy import inspect

    status = schema.reset(database_url)
    assert status.up_to_date
    tables = set(inspect(orm.engine(database_url)).get_table_names())
    assert tables == {*Base.metadata.tables, "alembic_version"}
