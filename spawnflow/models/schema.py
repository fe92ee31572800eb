"""The database schema, managed by Alembic: migrate, check, reset.

Commands that need tables call :func:`require_current` first, so a database that was
never migrated gives one clear sentence instead of a "no such table" traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError

MIGRATIONS = Path(__file__).parent / "migrations"


class SchemaNotCurrent(UserError):
    """The database is not at the revision this version of spawnflow expects."""


@dataclass(frozen=True)
class SchemaStatus:
    """Where a database's schema stands against the code's migrations."""

    url: str
    current: str | None
    head: str

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head

    def describe(self) -> str:
        if self.up_to_date:
            return f"the database {orm.masked(self.url)} is at revision {self.head} (current)"
        where = "not migrated" if self.current is None else f"at revision {self.current}"
        return (
            f"the database {orm.masked(self.url)} is {where}, but this spawnflow needs "
            f"revision {self.head}"
        )


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision in the code."""
    revision = ScriptDirectory.from_config(_config()).get_current_head()
    assert revision is not None  # None only for a migrations folder without revisions
    return revision


def status(url: str | None = None) -> SchemaStatus:
    """The schema status of the database at ``url`` (default: ``[database] url``)."""
    orm.check_reachable(url)
    return _status(url)


def _status(url: str | None) -> SchemaStatus:
    bound = orm.engine(url)
    with bound.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return SchemaStatus(str(url or bound.url), current, head())


def require_current(url: str | None = None) -> SchemaStatus:
    """The status, or SchemaNotCurrent telling the user to run ``spawnflow db migrate``."""
    found = status(url)
    if not found.up_to_date:
        raise SchemaNotCurrent(f"{found.describe()}; run `spawnflow db migrate`")
    return found


def migrate(url: str | None = None) -> tuple[str | None, SchemaStatus]:
    """Upgrade the database to the newest revision (creating a SQLite file if needed).

    Returns the revision it was at before, and its status now.
    """
    orm.check_reachable(url, create=True)
    before = _status(url).current
    with orm.engine(url).begin() as connection:
        command.upgrade(_config(connection), "head")
    return before, _status(url)


def reset(url: str | None = None) -> SchemaStatus:
    """Drop every spawnflow table, then migrate from scratch."""
    from spawnflow.models import Base

    orm.check_reachable(url, create=True)
    with orm.engine(url).begin() as connection:
        Base.metadata.drop_all(connection)
        connection.execute(text("DROP TABLE IF EXISTS alembic_version"))
    return migrate(url)[1]
