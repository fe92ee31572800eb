"""One SQLAlchemy engine per process (law 3).

An engine is created lazily by the process that first asks for one and is keyed
by that process's id. After a fork the child drops the engines it inherited with
``dispose(close=False)``: the parent's sockets stay open and untouched, and the
child opens its own connections when it needs some.

That alone does not stop code from using a connection it already held: a Session
or Connection object created before the fork still points at the parent's
connection. Every engine made here therefore stamps each connection with the pid
that opened it and refuses, with :class:`ForeignConnectionError`, to execute,
begin, commit, roll back, check out or reset a connection another process opened.
Before raising, the guard detaches the connection from SQLAlchemy so that no
clean-up path (invalidation, reset on return) closes it or sends it a ROLLBACK:
some drivers say goodbye to the server when closed (PyMySQL sends COM_QUIT),
which would end the parent's session.

Processes that run user code never import this module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.errors import UserError

_PID_KEY = "spawnflow.pid"

#: Drivers spawnflow ships extras for, used when a URL names none.
_DEFAULT_DRIVERS = {"postgresql": "psycopg", "mysql": "pymysql", "mariadb": "pymysql"}
_EXTRAS = {"psycopg": "postgres", "pymysql": "mysql"}

_engines: dict[tuple[int, str], Engine] = {}
_sessionmakers: dict[tuple[int, str], sessionmaker[Session]] = {}
#: What a fork child inherited and must neither use nor close: kept referenced so
#: that garbage collection cannot finalize (close) the parent's connections.
_inherited: list[Any] = []


class ForeignConnectionError(RuntimeError):
    """A process tried to use a database connection that another process opened."""


class DatabaseUnavailable(UserError):
    """The database cannot be reached or its driver is missing; one sentence for the user."""


def normalize_url(url: str | URL) -> URL:
    """The URL with spawnflow's default driver filled in (psycopg, PyMySQL)."""
    parsed = make_url(url)
    if "+" not in parsed.drivername and parsed.drivername in _DEFAULT_DRIVERS:
        parsed = parsed.set(drivername=f"{parsed.drivername}+{_DEFAULT_DRIVERS[parsed.drivername]}")
    return parsed


def masked(url: str | URL) -> str:
    """The URL as a string with its password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except exc.ArgumentError:
        return "<unparseable URL>"


def engine(url: str | None = None) -> Engine:
    """This process's engine for ``url`` (default: ``[database] url``), created on first use."""
    snapshot = settings_module.current()
    url = url or snapshot.database.url
    key = (os.getpid(), url)
    found = _engines.get(key)
    if found is None:
        found = _engines[key] = _create_engine(url, snapshot)
    return found


def sessionmaker_for(url: str | None = None) -> sessionmaker[Session]:
    """A sessionmaker bound to this process's engine for ``url``."""
    bound = engine(url)
    key = (os.getpid(), str(bound.url))
    maker = _sessionmakers.get(key)
    if maker is None:
        maker = _sessionmakers[key] = sessionmaker(bound, expire_on_commit=False)
    return maker


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A session that commits when the block succeeds and rolls back when it raises."""
    with sessionmaker_for(url).begin() as session:
        yield session


def dispose_all() -> None:
    """Close this process's engines (on shutdown, or between tests)."""
    pid = os.getpid()
    for key in [k for k in _engines if k[0] == pid]:
        _engines.pop(key).dispose()
    for key in [k for k in _sessionmakers if k[0] == pid]:
        _sessionmakers.pop(key)


def engines_of_other_processes() -> int:
    """How many engines this process holds that another process created (0 after a fork)."""
    pid = os.getpid()
    return sum(1 for key in _engines if key[0] != pid)


def check_reachable(url: str | None = None) -> None:
    """Connect once; DatabaseUnavailable with the reason if that fails."""
    try:
        with engine(url).connect() as connection:
            connection.execute(text("SELECT 1"))
    except exc.OperationalError as error:
        raise DatabaseUnavailable(
            f"cannot connect to the database {masked(url or _configured_url())}: "
            f"{_first_line(error.orig)}"
        ) from None


def _configured_url() -> str:
    return settings_module.current().database.url


def _first_line(error: BaseException | None) -> str:
    text_ = str(error or "").strip().splitlines()
    return text_[0].rstrip(".") if text_ else type(error).__name__


def _create_engine(url: str, snapshot: settings_module.Settings) -> Engine:
    parsed = normalize_url(url)
    options: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        options["connect_args"] = {"timeout": snapshot.database.sqlite_busy_timeout}
    else:
        options["pool_pre_ping"] = True
        options["connect_args"] = {"connect_timeout": snapshot.database.connect_timeout}
    if parsed.get_backend_name() in ("mysql", "mariadb"):
        options["pool_recycle"] = 3600
    try:
        created = create_engine(parsed, **options)
    except ModuleNotFoundError as error:
        driver = parsed.get_driver_name()
        extra = _EXTRAS.get(driver)
        hint = f": pip install 'spawnflow[{extra}]'" if extra else ""
        raise DatabaseUnavailable(
            f"the database URL {masked(parsed)} needs the {error.name!r} package{hint}"
        ) from None
    _install_guards(created)
    if parsed.get_backend_name() == "sqlite":
        event.listen(created, "connect", _sqlite_pragmas(snapshot.database.sqlite_busy_timeout))
    return created


def _sqlite_pragmas(busy_timeout: float):
    def on_connect(dbapi_connection: Any, _: Any) -> None:
        cursor = dbapi_connection.cursor()
        # WAL lets readers in other processes work while one process writes.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return on_connect


# -- the guard ------------------------------------------------------------------------


def _install_guards(target: Engine) -> None:
    event.listen(target, "connect", _stamp)
    event.listen(target, "checkout", _refuse_foreign_checkout)
    event.listen(target, "reset", _refuse_foreign_reset)
    for name in ("before_cursor_execute", "begin", "commit", "rollback",
                 "savepoint", "rollback_savepoint", "release_savepoint"):  # fmt: skip
        event.listen(target, name, _refuse_foreign_use)


def _stamp(dbapi_connection: Any, record: Any) -> None:
    record.info[_PID_KEY] = os.getpid()


def _refuse(record: Any) -> None:
    owner = record.info.get(_PID_KEY)
    if owner is None or owner == os.getpid():
        return
    if record.dbapi_connection is not None:
        _inherited.append(record.dbapi_connection)
        record.dbapi_connection = None
    raise ForeignConnectionError(
        f"process {os.getpid()} tried to use a database connection that process {owner} "
        "opened; a process must open its own (spawnflow.bootstrap.orm.engine())"
    )


def _refuse_foreign_checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    _refuse(record)


def _refuse_foreign_reset(dbapi_connection: Any, record: Any, state: Any) -> None:
    _refuse(record)


def _refuse_foreign_use(connection: Any, *args: Any) -> None:
    # The pooled connection this Connection holds. The public ``.connection``
    # property would re-open an invalidated one, which is exactly what not to do here.
    fairy = getattr(connection, "_dbapi_connection", None)
    record = getattr(fairy, "_connection_record", None)
    if record is not None:
        _refuse(record)


def _after_fork_in_child() -> None:
    """Drop inherited engines without closing the parent's connections."""
    pid = os.getpid()
    for key in [k for k in _engines if k[0] != pid]:
        inherited = _engines.pop(key)
        _inherited.append(inherited.pool)
        inherited.dispose(close=False)
    for key in [k for k in _sessionmakers if k[0] != pid]:
        _sessionmakers.pop(key)


os.register_at_fork(after_in_child=_after_fork_in_child)


def server_connection_id(connection: Any) -> str:
    """Which server-side connection ``connection`` (a SQLAlchemy Connection) is.

    The server's own id where there is a server (the backend pid on PostgreSQL, the
    connection id on MySQL/MariaDB); for SQLite, the opening process and driver object.
    """
    backend = connection.dialect.name
    if backend == "postgresql":
        return f"postgresql:{connection.execute(text('SELECT pg_backend_pid()')).scalar_one()}"
    if backend in ("mysql", "mariadb"):
        return f"mysql:{connection.execute(text('SELECT CONNECTION_ID()')).scalar_one()}"
    connection.execute(text("SELECT 1"))
    driver_connection = connection.connection.driver_connection
    return f"sqlite:{connection.info.get(_PID_KEY)}:{id(driver_connection):x}"
