"""Riding out a database outage: a lost connection is transient, for a while.

A server restart, a managed PostgreSQL's failover, a network blip between a laptop
and a shared database: every process that holds an engine runs its units of work
through :func:`ride_out`, which retries a unit that met a lost or refused connection
(or SQLite's lock past its busy timeout) with capped exponential backoff, for up to
``[database] outage_tolerance`` seconds. It logs one WARNING when an outage starts,
naming the database (password hidden) and the retry interval, and one line when the
database is back. Past the tolerance it raises :class:`DatabaseUnavailable`, one
sentence for the user. A unit of work is a transaction: the one that failed was rolled
back, and it runs again from its start, so nothing is half-written.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import exc

from spawnflow.bootstrap import orm
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.orm import DatabaseUnavailable

T = TypeVar("T")

#: MySQL/MariaDB client and server codes of a connection that is gone or refused.
_MYSQL_GONE = {1053, 1927, 2002, 2003, 2006, 2013, 2055}
#: What drivers say when the server is out of reach (lowercase).
_GONE = (
    "server closed the connection", "connection refused", "terminating connection",
    "the database system is starting up", "the database system is shutting down",
    "could not connect", "connection timeout", "connection timed out", "connection is lost",
    "consuming input failed", "ssl connection has been closed", "connection is closed",
    "connection already closed", "lost connection", "has gone away", "can't connect",
    "broken pipe", "connection reset", "no route to host",
    "database is locked", "database table is locked",  # SQLite past its busy timeout
)  # fmt: skip
#: The longest wait between two attempts, in seconds.
MAX_BACKOFF = 5.0
#: The longest wait, in seconds, between two calls of a ``meanwhile`` while backing off.
MEANWHILE_EVERY = 0.5


class GaveUp(DatabaseUnavailable):
    """:func:`ride_out` stopped waiting for the database because its ``give_up()`` said
    so (a stop request): the unit did not run, and the process goes on stopping."""


#: When the database last came back after an outage this process saw (UTC), if ever.
_recovered_at: dt.datetime | None = None


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` means the database is out of reach for now, not that the work
    is wrong (a bad password, a missing table, a read-only file are not transient)."""
    if isinstance(error, exc.DisconnectionError):
        return True
    if not isinstance(error, exc.DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    if not isinstance(error, exc.OperationalError | exc.InterfaceError):
        return False
    original = error.orig
    code = original.args[0] if original is not None and original.args else None
    if isinstance(code, int) and code in _MYSQL_GONE:
        return True
    text = str(original or error).lower()
    return any(marker in text for marker in _GONE)


def explain(error: exc.SQLAlchemyError, url: str | None = None) -> str:
    """One sentence for a database error that reached a command: which database, what it
    said, and what to do when that is clear (a read-only file, a server out of reach)."""
    url = url or settings_module.current().database.url
    cause = orm.first_line(getattr(error, "orig", None) or error)
    lowered = cause.lower()
    if "readonly database" in lowered or "read-only" in lowered:
        hint = "; make the database file and its folder writable"
    elif "unable to open database file" in lowered:
        hint = "; check that the database file's folder exists and is writable"
    else:
        hint = "; is the server running and reachable?" if is_transient(error) else ""
    return f"the database {orm.masked(url)} failed: {cause}{hint}"


def recovered_at() -> dt.datetime | None:
    """When the database came back after the last outage this process rode out."""
    return _recovered_at


def ride_out(
    unit: Callable[[], T],
    *,
    what: str,
    tolerance: float | None = None,
    give_up: Callable[[], bool] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> T:
    """Run ``unit`` (a unit of work: one or more transactions that can run again) until
    it succeeds, waiting out a database outage of up to ``tolerance`` seconds
    (``[database] outage_tolerance`` by default; 0 fails at once).

    ``what`` says what the process was doing, for the log and the error. ``give_up()``,
    checked between attempts, ends the wait early (a stop request); ``meanwhile()`` runs
    while it waits between attempts, at least every :data:`MEANWHILE_EVERY` seconds (a
    worker telling its executor it is still alive).

    Raises:
        DatabaseUnavailable: the database stayed out of reach past the tolerance.
        GaveUp: ``give_up()`` said to stop waiting.
    """
    global _recovered_at
    snapshot = settings_module.current()
    if tolerance is None:
        tolerance = snapshot.database.outage_tolerance
    started: float | None = None
    attempts = 0
    while True:
        if attempts:
            # An attempt after an outage: as far as the work inside it can tell, the
            # database is back now (a scheduler gives heartbeats their time from here).
            _recovered_at = dt.datetime.now(dt.UTC)
        try:
            result = unit()
        except (exc.DBAPIError, exc.DisconnectionError) as error:
            if not is_transient(error):
                raise
            cause = orm.first_line(getattr(error, "orig", None) or error)
            now = time.monotonic()
            if started is None:
                started = now
            waited = now - started
            if give_up is not None and give_up():
                raise _gave_up(snapshot.database.url, what, waited, cause) from None
            if waited >= tolerance:
                raise DatabaseUnavailable(
                    f"the database {orm.masked(snapshot.database.url)} was out of reach "
                    f"for {waited:.0f} s while {what} ([database] outage_tolerance is "
                    f"{tolerance:g} s): {cause}"
                ) from None
            delay = min(MAX_BACKOFF, 0.25 * 2**attempts, max(0.0, tolerance - waited))
            if attempts == 0:
                _log().warning(
                    "database out of reach; retrying", database=orm.masked(snapshot.database.url),
                    what=what, retry_seconds=delay, tolerance_seconds=tolerance,
                    error=cause,
                )  # fmt: skip
            attempts += 1
            if not _pause(delay, meanwhile, give_up):
                waited = time.monotonic() - started
                raise _gave_up(snapshot.database.url, what, waited, cause) from None
            continue
        if started is not None:
            _log().warning("database reachable again", what=what,
                           outage_seconds=round(time.monotonic() - started, 1))  # fmt: skip
        return result


def _pause(
    delay: float, meanwhile: Callable[[], None] | None, give_up: Callable[[], bool] | None
) -> bool:
    """Wait ``delay`` seconds, running ``meanwhile`` at its start and at least every
    :data:`MEANWHILE_EVERY` seconds (a backoff may be longer than a worker may stay
    silent to its executor); False, at once, if ``give_up()`` says so meanwhile."""
    end = time.monotonic() + delay
    while True:
        if meanwhile is not None:
            meanwhile()
        if give_up is not None and give_up():
            return False
        remaining = end - time.monotonic()
        if remaining <= 0:
            return True
        time.sleep(min(remaining, MEANWHILE_EVERY))


def _gave_up(url: str, what: str, waited: float, cause: str) -> GaveUp:
    return GaveUp(
        f"the database {orm.masked(url)} was out of reach while {what}; stopped waiting "
        f"for it after {waited:.0f} s: {cause}"
    )


def _log():
    from spawnflow.bootstrap import logs

    return logs.get_logger("spawnflow.database")
