"""One SQLAlchemy engine per process (law 3).

An engine is created lazily by the process that first asks for one and is keyed
by that process's id. After a fork the child drops the engines it inherited with
``dispose(close=False)``: the parent's sockets stay open and untouched, and the
child opens its own connections when it needs some.

That alone does not stop code from using a connection it already held: a Session
or Connection object created before the fork still points at the parent's
connection. Every engine made here therefore stamps each connection with the pid
that opened it and refuses, with :class:`ForeignConnectionError`, to execute,
begin, commit, roll back, check out, reset, invalidate, detach or close a
connection another process opened. Before raising, the guard takes the driver
connection away from SQLAlchemy, so that no clean-up path closes it or sends it a
ROLLBACK: drivers say goodbye to the server when closed (PyMySQL sends COM_QUIT,
psycopg terminates the session), which would end the parent's session.

Processes that run user code never import this module.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, exc, text
from sqlalchemy.engine import URL, make_url

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings_table import hide_password

if TYPE_CHECKING:
    # The ORM is imported by the first session: a command that reads with SQLAlchemy
    # Core (a Connection from engine()) does not pay for it.
    from sqlalchemy.orm import Session, sessionmaker

_PID_KEY = "spawnflow.pid"

#: Drivers spawnflow ships extras for, used when a URL names none.
_DEFAULT_DRIVERS = {"postgresql": "psycopg", "mysql": "pymysql", "mariadb": "pymysql"}
_EXTRAS = {"psycopg": "postgres", "pymysql": "mysql"}

_engines: dict[tuple[int, str], Engine] = {}
#: Owner pids of detached driver connections, which no longer have a pool record
#: (None, as from _owner, for one whose record was never stamped).
_detached_owners: dict[int, int | None] = {}
_sessionmakers: dict[tuple[int, str, str], sessionmaker[Session]] = {}
#: What a fork child inherited and must neither use nor close: kept referenced so
#: that garbage collection cannot finalize (close) the parent's connections.
_inherited: list[Any] = []
#: The connections out of this process's pools, by pool record: (thread, a weak
#: reference to the connection, which garbage collection may still check in), what a
#: stop that unwound a thread may have left in a transaction. A fork child starts
#: with none: the guard refuses it the parent's.
_checked_out: dict[int, tuple[int, Any]] = {}
#: The driver cursors of SQLite connections, weakly: see _close_statements_of.
_sqlite_cursors: weakref.WeakSet[Any] = weakref.WeakSet()


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
    except (exc.ArgumentError, ValueError):
        return hide_password(str(url))


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
    from sqlalchemy.orm import sessionmaker

    bound = engine(url)
    key = (os.getpid(), str(bound.url), "plain")
    maker = _sessionmakers.get(key)
    if maker is None:
        maker = _sessionmakers[key] = sessionmaker(bound, expire_on_commit=False)
    return maker


@contextmanager
def session_scope(url: str | None = None, *, write: bool = True) -> Iterator[Session]:
    """A unit of work: commits when the block succeeds, rolls back when it raises.

    On SQLite a ``write`` scope takes the database's write lock when it begins (see
    :func:`_begin`); pass ``write=False`` for one that only reads, so that it
    neither waits for writers nor makes them wait. Inside :func:`one_connection`
    the unit of work runs on that block's connection.
    """
    from sqlalchemy.orm import Session, sessionmaker

    maker = sessionmaker_for(url)
    bound = maker.kw["bind"]
    pinned = _pinned.get((os.getpid(), str(bound.url)))
    if pinned is not None and not pinned.in_transaction():
        # Connection.execution_options changes this connection in place (SQLAlchemy 2).
        pinned.execution_options(**{_WRITE_LOCK: write})
        with Session(bind=pinned, expire_on_commit=False) as session, session.begin():
            yield session
        return
    if write:
        key = (os.getpid(), str(bound.url), "write")
        writing = _sessionmakers.get(key)
        if writing is None:
            writer = bound.execution_options(**{_WRITE_LOCK: True})
            writing = _sessionmakers[key] = sessionmaker(writer, expire_on_commit=False)
        maker = writing
    with maker.begin() as session:
        yield session


#: The connection each engine's session scopes share inside ``one_connection``.
_pinned: dict[tuple[int, str], Connection] = {}


@contextmanager
def one_connection(url: str | None = None) -> Iterator[None]:
    """Run the block's session scopes one after another on a single connection.

    A loop that runs several short units of work per turn then checks a connection
    out of the pool (and, on a server database, pings it) once per turn rather than
    once per unit. Each scope still commits on its own. A scope opened while
    another is still open gets a pooled connection of its own, as outside the block.
    """
    bound = engine(url)
    key = (os.getpid(), str(bound.url))
    if key in _pinned:
        yield
        return
    with bound.connect() as connection:
        _pinned[key] = connection
        try:
            yield
        finally:
            del _pinned[key]


def end_interrupted_work() -> int:
    """Invalidate the connections the calling thread still has out of its pools, and
    return how many there were.

    A second stop request raises :class:`~spawnflow.bootstrap.lifecycle.WarmStop`
    wherever the main thread is, inside SQLAlchemy too, where it can skip the rollback
    of a unit of work: its connection stays open, in its transaction, kept alive by the
    traceback while ``finally`` blocks run. On SQLite that transaction holds the write
    lock, which the stopping process then waits for itself when it records that it
    stopped (seen: a scheduler stopped cold under load that waited out its busy
    timeout and left its task ``running``). Closing each such connection rolls back
    what it was in the middle of, and its locks go with it (on SQLite, once its
    unfinished statements are closed: see :func:`_close_statements_of`). Call this
    only where none of the thread's own work can still use one: on the way out after
    a stop.
    """
    here = threading.get_ident()
    left = [key for key, (thread, _) in _checked_out.items() if thread == here]
    for key in left:
        fairy = _checked_out.pop(key)[1]()
        if fairy is not None and fairy.is_valid:
            fairy.invalidate()  # closes the driver connection; the database rolls back
    return len(left)


def _track_checkout(dbapi_connection: Any, record: Any, fairy: Any) -> None:
    _checked_out[id(record)] = (threading.get_ident(), weakref.ref(fairy))


def _track_checkin(dbapi_connection: Any, record: Any) -> None:
    _checked_out.pop(id(record), None)


def _track_sqlite_cursor(connection: Any, cursor: Any, *_: Any) -> None:
    _sqlite_cursors.add(cursor)


def _close_statements_of(dbapi_connection: Any, *_: Any) -> None:
    """Before a SQLite connection goes back to the pool or is closed: close its cursors
    that are still open, which a stop can leave in the middle of a result (a traceback
    keeps them alive while ``finally`` blocks run).

    An unfinished statement holds a transaction of its own. The ROLLBACK of its unit
    of work then leaves the connection a read transaction, on which every later write
    fails at once with "database is locked" (WAL: its snapshot is behind, and SQLite
    calls no busy handler to upgrade a transaction already open); and closing the
    connection under it makes SQLite keep the connection, write lock and all, until
    the statement is freed. Seen in a scheduler stopped cold, which could then not
    record that it stopped. Closing the cursor resets its statement.
    """
    import sqlite3  # imported already: a SQLite engine's pool calls this

    for cursor in list(_sqlite_cursors):
        if cursor.connection is dbapi_connection:
            with suppress(sqlite3.Error):  # closed with its connection already
                cursor.close()


def dispose_all() -> None:
    """Close this process's engines (on shutdown, or between tests)."""
    pid = os.getpid()
    for key in [k for k in _engines if k[0] == pid]:
        _engines.pop(key).dispose()
    for maker_key in [k for k in _sessionmakers if k[0] == pid]:
        _sessionmakers.pop(maker_key)


def engines_of_other_processes() -> int:
    """How many engines this process holds that another process created (0 after a fork)."""
    pid = os.getpid()
    return sum(1 for key in _engines if key[0] != pid)


def check_reachable(url: str | None = None, *, create: bool = False) -> None:
    """Connect once; DatabaseUnavailable with the reason if that fails.

    A SQLite file that does not exist is created (with its folder) only if
    ``create``; otherwise it is reported, rather than left behind empty.
    """
    url = url or _configured_url()
    try:
        ping(url, create=create)
    except exc.DBAPIError as error:
        # SQLite opens a file it cannot write (or a folder it cannot make its WAL
        # files in) as "unable to open database file": say which, and what to do.
        require_writable(url)
        raise DatabaseUnavailable(
            f"cannot connect to the database {masked(url)}: {first_line(error.orig)}"
        ) from None
    except (exc.ArgumentError, TypeError, ValueError) as error:
        raise DatabaseUnavailable(
            f"the database URL {masked(url)} is not usable: {first_line(error)}"
        ) from None


def ping(url: str | None = None, *, create: bool = False) -> None:
    """Connect once and run ``SELECT 1``; the driver's error (a DBAPIError) as it is,
    for :func:`spawnflow.bootstrap.outage.ride_out` to tell an outage from a mistake.

    A SQLite file that does not exist is DatabaseUnavailable unless ``create``.
    """
    url = url or _configured_url()
    database = _sqlite_file(url)
    if database is not None and not database.exists():
        if not create:
            raise DatabaseUnavailable(
                f"the SQLite database file {database} does not exist; "
                "run `spawnflow db migrate` to create it"
            )
        database.parent.mkdir(parents=True, exist_ok=True)
    with engine(url).connect() as connection:
        connection.execute(text("SELECT 1"))


def require_writable(url: str | None = None) -> None:
    """For a SQLite file: check that it and its folder can be written (SQLite writes
    its journal next to the file), so that a read-only file is one sentence before any
    work starts, not a failed write in the middle of it. Other databases: nothing."""
    from spawnflow.bootstrap import paths

    database = _sqlite_file(url or _configured_url())
    if database is None:
        return
    hint = "make the file and its folder writable, or set [database] url"
    if database.exists() and not os.access(database, os.W_OK):
        raise DatabaseUnavailable(f"the SQLite database file {database} is read-only; {hint}")
    try:
        paths.require_writable_folder(database.parent, "database folder")
    except paths.FolderUnwritable as error:
        raise DatabaseUnavailable(f"{error}, or set [database] url") from None


def _sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL, or None for other databases and in-memory SQLite."""
    try:
        parsed = make_url(url)
    except exc.ArgumentError:
        return None
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    return None if database.startswith("file:") else Path(database)


def _configured_url() -> str:
    return settings_module.current().database.url


def first_line(error: BaseException | None) -> str:
    """The first line of an error's message, for a one-sentence report."""
    text_ = str(error or "").strip().splitlines()
    return text_[0].rstrip(".") if text_ else type(error).__name__


def _create_engine(url: str, snapshot: settings_module.Settings) -> Engine:
    try:
        parsed = normalize_url(url)
    except (exc.ArgumentError, ValueError) as error:
        raise DatabaseUnavailable(
            f"the database URL {masked(url)} is not usable: {first_line(error)}"
        ) from None
    options: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        options["connect_args"] = {"timeout": snapshot.database.sqlite_busy_timeout}
    else:
        options["pool_pre_ping"] = True
        options["connect_args"] = {"connect_timeout": snapshot.database.connect_timeout}
    if parsed.get_backend_name() in ("mysql", "mariadb"):
        options["pool_recycle"] = 3600
        # InnoDB's default, REPEATABLE READ, takes gap locks that make concurrent
        # schedulers deadlock on index ranges, and pins plain SELECTs to a snapshot.
        options["isolation_level"] = "READ COMMITTED"
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
        event.listen(created, "begin", _begin)
        event.listen(created, "before_cursor_execute", _track_sqlite_cursor)
        for name in ("reset", "invalidate", "close", "close_detached"):
            event.listen(created, name, _close_statements_of)
    return created


#: Execution option of connections whose SQLite transactions take the write lock at BEGIN.
_WRITE_LOCK = "spawnflow_sqlite_write_lock"


def _begin(connection: Any) -> None:
    # A deferred SQLite transaction that reads and then writes must upgrade its
    # lock; when another process committed in between, SQLite fails it at once
    # ("database is locked") rather than wait, since waiting could deadlock. A unit
    # of work that writes takes the write lock at BEGIN instead (BEGIN IMMEDIATE),
    # so the busy timeout applies and processes queue for the database. Reads stay
    # deferred: in WAL mode they never wait for a writer.
    immediate = connection.get_execution_options().get(_WRITE_LOCK, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _sqlite_pragmas(busy_timeout: float):
    def on_connect(dbapi_connection: Any, _: Any) -> None:
        # Let SQLAlchemy's begin event issue BEGIN (see _begin_immediate).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # WAL lets readers in other processes work while one process writes.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        # With WAL, NORMAL keeps the database consistent through a crash; it syncs at
        # checkpoints instead of at every commit.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return on_connect


# -- the guard ------------------------------------------------------------------------


_CONNECTION_EVENTS = (
    "before_cursor_execute", "begin", "commit", "rollback", "savepoint", "rollback_savepoint",
    "release_savepoint", "begin_twophase", "prepare_twophase", "rollback_twophase",
    "commit_twophase",
)  # fmt: skip


def _install_guards(target: Engine) -> None:
    event.listen(target, "connect", _stamp)
    event.listen(target, "checkout", _refuse_foreign_checkout)
    event.listen(target, "reset", _refuse_foreign_reset)
    event.listen(target, "invalidate", _refuse_foreign_invalidate)
    event.listen(target, "close", _refuse_foreign_pooled)
    event.listen(target, "detach", _refuse_foreign_pooled)
    event.listen(target, "close_detached", _refuse_foreign_detached)
    for name in _CONNECTION_EVENTS:
        event.listen(target, name, _refuse_foreign_use)
    # After the guard, which refuses a foreign connection before it is tracked.
    event.listen(target, "checkout", _track_checkout)
    event.listen(target, "checkin", _track_checkin)


def _stamp(dbapi_connection: Any, record: Any) -> None:
    record.info[_PID_KEY] = os.getpid()


def _refuse(owner: int | None, dbapi_connection: Any, record: Any = None) -> None:
    """Raise ForeignConnectionError if ``owner`` is another process, keeping its connection."""
    if owner is None or owner == os.getpid():
        return
    if dbapi_connection is not None:
        _inherited.append(dbapi_connection)
    if record is not None:
        record.dbapi_connection = None
    raise ForeignConnectionError(
        f"process {os.getpid()} tried to use a database connection that process {owner} "
        "opened; a process must open its own (spawnflow.bootstrap.orm.engine())"
    )


def _owner(dbapi_connection: Any, record: Any) -> int | None:
    if record is not None:
        return record.info.get(_PID_KEY)
    return _detached_owners.get(id(dbapi_connection))


def _refuse_foreign_checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    _refuse(_owner(dbapi_connection, record), record.dbapi_connection, record)


def _refuse_foreign_reset(dbapi_connection: Any, record: Any, reset_state: Any) -> None:
    _refuse_foreign_pooled(dbapi_connection, record)


def _refuse_foreign_invalidate(dbapi_connection: Any, record: Any, exception: Any) -> None:
    _refuse_foreign_pooled(dbapi_connection, record)


def _refuse_foreign_pooled(dbapi_connection: Any, record: Any) -> None:
    """reset, invalidate, close and detach: before the pool touches the driver connection."""
    owner = _owner(dbapi_connection, record)
    _refuse(owner, dbapi_connection, record)
    if record is not None and dbapi_connection is not None and record.dbapi_connection is None:
        # A detach: from now on only the driver connection itself says who owns it.
        _detached_owners[id(dbapi_connection)] = owner


def _refuse_foreign_detached(dbapi_connection: Any) -> None:
    _refuse(_detached_owners.get(id(dbapi_connection)), dbapi_connection)
    _detached_owners.pop(id(dbapi_connection), None)


def _refuse_foreign_use(connection: Any, *args: Any) -> None:
    # The pooled connection this Connection holds. The public ``.connection``
    # property would re-open an invalidated one, which is exactly what not to do here.
    fairy = getattr(connection, "_dbapi_connection", None)
    if fairy is None:
        return
    record = getattr(fairy, "_connection_record", None)
    dbapi_connection = getattr(fairy, "dbapi_connection", None)
    _refuse(_owner(dbapi_connection, record), dbapi_connection, record)


def _after_fork_in_child() -> None:
    """Drop inherited engines without closing the parent's connections."""
    pid = os.getpid()
    for key in [k for k in _engines if k[0] != pid]:
        inherited = _engines.pop(key)
        _inherited.append(inherited.pool)
        inherited.dispose(close=False)
    for maker_key in [k for k in _sessionmakers if k[0] != pid]:
        _sessionmakers.pop(maker_key)
    for key in [k for k in _pinned if k[0] != pid]:
        _inherited.append(_pinned.pop(key))
    _checked_out.clear()  # the parent's, by the parent's threads
    _sqlite_cursors.clear()  # the parent's: closing one would reset the parent's statement


platforms.at_fork_in_child(_after_fork_in_child)


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
