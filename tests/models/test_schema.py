"""The migrations create exactly the tables the models describe, on every database."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from spawnflow.bootstrap import orm
from spawnflow.models import Base, schema
from tests.commands.test_listings import modules_imported_by


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


def test_the_code_s_head_is_alembic_s_and_the_history_is_one_line():
    # schema.head() reads the migration files' names; Alembic reads their contents.
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(schema._config())
    assert schema.head() == scripts.get_current_head()
    chain = [script.revision for script in scripts.walk_revisions()]  # head first
    assert chain == [f"{number:04d}" for number in range(len(chain), 0, -1)]


def test_the_revision_is_read_as_alembic_reads_it(migrated_database, database_url):
    with orm.engine(database_url).connect() as connection:
        ours = schema.current_revision(connection)
        assert ours == MigrationContext.configure(connection).get_current_revision()
    assert ours == schema.head()
    assert schema.status(database_url).up_to_date


def test_a_database_never_migrated_is_at_no_revision(empty_database_url, make_settings):
    make_settings(**{"database.url": empty_database_url})
    orm.check_reachable(empty_database_url, create=True)  # an empty SQLite file
    status = schema.status(empty_database_url)
    assert (status.current, status.up_to_date) == (None, False)
    assert "is not migrated, but this spawnflow needs revision" in status.describe()


@pytest.mark.parametrize(
    "command",
    [["db", "check"], ["db", "migrate"], ["dags", "list"], ["runs", "list"]],
    ids="-".join,
)
def test_commands_that_check_the_schema_do_not_import_alembic(
    command, migrated_database, database_url, home
):
    imported = modules_imported_by(command, home, database_url)
    assert {m for m in imported if m.split(".")[0] == "alembic"} == set()
