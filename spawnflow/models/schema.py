"""The database schema, managed by Alembic: migrate, check, reset.

Commands that need tables call :func:`require_current` first, so a database that was
never migrated gives one clear sentence instead of a "no such table" traceback. The
check reads the revision table and the migration files' names without importing
Alembic (a tenth of a second of every command's start); only migrating imports it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
#: A migration file's name starts with its revision: ``0009_triggers.py``. Revisions
#: are numbered in order, each one's down_revision the one before (a test holds
#: Alembic to the same head).
_REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")
#: Alembic's table of the revision a database is at.
VERSION_TABLE = "alembic_version"


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
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision in the code: the highest-numbered migration file."""
    found = (_REVISION_FILE.match(path.name) for path in (MIGRATIONS / "versions").iterdir())
    return max(match.group(1) for match in found if match)


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at (None if it was never migrated), read as
    Alembic reads it, from its one-row version table."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    versions = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars()
    found = sorted(versions)
    # One row on a linear history; several would be branches, which are never current.
    return ", ".join(found) if found else None


def status(url: str | None = None) -> SchemaStatus:
    """The schema status of the database at ``url`` (default: ``[database] url``)."""
    orm.check_reachable(url)
    return _status(url)


def _status(url: str | None) -> SchemaStatus:
    bound = orm.engine(url)
    with bound.connect() as connection:
        current = current_revision(connection)
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
    found = _status(url)
    if found.up_to_date:
        return found.current, found  # nothing to do: Alembic need not even be imported
    from alembic import command

    before = found.current
    with orm.engine(url).begin() as connection:
        command.upgrade(_config(connection), "head")
    return before, _status(url)


def reset(url: str | None = None) -> SchemaStatus:
    """Drop every spawnflow table, then migrate from scratch."""
    from spawnflow.models import Base

    orm.check_reachable(url, create=True)
    with orm.engine(url).begin() as connection:
        Base.metadata.drop_all(connection)
        connection.execute(text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))
    return migrate(url)[1]
