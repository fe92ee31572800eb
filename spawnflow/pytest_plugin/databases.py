"""The plugin's databases: a migrated SQLite file copied for each test, or one database
per xdist worker on a PostgreSQL or MariaDB server, emptied between tests."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path


class SqliteTemplate:
    """One migrated SQLite database per worker, copied into each test's home: every test
    starts from empty tables without paying for the migrations."""

    def __init__(self, folder: Path, worker: str) -> None:
        from spawnflow.models import schema

        self.path = folder / f"template-{schema.head()}-{worker}.db"
        if not self.path.exists():  # kept between sessions with --spawnflow-reuse-db
            partial = self.path.with_suffix(".partial")
            partial.unlink(missing_ok=True)
            _migrate(_sqlite_url(partial), folder)
            partial.replace(self.path)

    def url_for(self, home: Path) -> str:
        home.mkdir(parents=True, exist_ok=True)
        copy = home / "spawnflow.db"
        shutil.copyfile(self.path, copy)
        return _sqlite_url(copy)

    def clean(self) -> None:
        """Nothing: the test's copy goes with its home."""


class ServerDatabase:
    """A database of this worker's own on the server ``url`` names, migrated once."""

    def __init__(self, url: str, worker: str) -> None:
        import sqlalchemy as sa

        self.server = sa.make_url(url)
        self.name = f"spawnflow_plugin_{uuid.uuid4().hex[:8]}_{worker}"
        self._admin(f"CREATE DATABASE {self._quoted()}")
        self.url = self.server.set(database=self.name).render_as_string(hide_password=False)
        _migrate(self.url, None)

    def url_for(self, home: Path) -> str:
        return self.url

    def clean(self) -> None:
        """Empty every table (the schema's version stays), children before parents."""
        import sqlalchemy as sa

        from spawnflow.models import Base

        engine = sa.create_engine(self.url)
        try:
            with engine.begin() as connection:
                for table in reversed(Base.metadata.sorted_tables):
                    connection.execute(table.delete())
        finally:
            engine.dispose()

    def drop(self) -> None:
        force = " WITH (FORCE)" if self._postgres else ""
        self._admin(f"DROP DATABASE IF EXISTS {self._quoted()}{force}")

    @property
    def _postgres(self) -> bool:
        return self.server.get_backend_name() == "postgresql"

    def _quoted(self) -> str:
        return f'"{self.name}"' if self._postgres else f"`{self.name}`"

    def _admin(self, statement: str) -> None:
        import sqlalchemy as sa

        engine = sa.create_engine(self.server, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(sa.text(statement))
        finally:
            engine.dispose()


def _sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.as_posix()}"


def _migrate(url: str, home: Path | None) -> None:
    """Migrate ``url`` under settings of its own (nothing is installed yet when a session
    starts; what was is put back)."""
    import os

    from spawnflow.bootstrap import orm
    from spawnflow.bootstrap import settings as settings_module
    from spawnflow.bootstrap.settings import Override
    from spawnflow.models import schema

    previous = settings_module.installed()
    environ = {"SPAWNFLOW_HOME": str(home or os.getcwd())}
    settings_module.install(settings_module.resolve(
        environ=environ, overrides=[Override("database.url", url, "spawnflow pytest plugin")]
    ))  # fmt: skip
    try:
        schema.migrate(url)
    finally:
        orm.dispose_all()
        settings_module.restore(previous)
