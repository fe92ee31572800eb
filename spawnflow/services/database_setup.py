"""Getting the database ready for ``spawnflow standalone``, in a child of its own.

Before it starts its components, standalone waits for the database (riding out an
outage), checks that it can write it and migrates it. Done in standalone's own process,
that loaded SQLAlchemy and Alembic there for good: 40 MiB that standalone, which then
only watches its children, never used again under spawn and forkserver (under fork its
components share the pages it loads before it forks them, see
:func:`spawnflow.bootstrap.forkservers.share`). The child answers with one message.
"""

from __future__ import annotations

from spawnflow.bootstrap import launcher, lifecycle
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.watch import Watch, Watched
from spawnflow.comms import DatabaseNotReady, DatabaseReady

TARGET = "spawnflow.services.database_setup:run"


class DatabaseSetupStopped(Exception):
    """A stop request ended the wait for the database."""


def prepare(settings: Settings, *, console_level: str | None = "WARNING") -> DatabaseReady:
    """Make the database ready in a ``database-setup`` child and say how it is; what
    the child logs at ``console_level`` or above also goes to this process's stderr.

    Raises:
        UserError: the database cannot be reached, written or migrated (one sentence).
        DatabaseSetupStopped: a stop request came first.
    """
    spec = launcher.ChildSpec("database-setup", TARGET, settings=settings, log_to_console=True,
                              console_level=console_level, warm_stop_group=False)  # fmt: skip
    answers: list[DatabaseReady | DatabaseNotReady] = []
    ended: list[str] = []
    watch = Watch()

    def on_message(watched: Watched, message: object) -> None:
        if isinstance(message, DatabaseReady | DatabaseNotReady):
            answers.append(message)

    def on_exit(watched: Watched, status: launcher.ExitStatus) -> None:
        ended.append(status.describe())

    child = launcher.launch(spec)
    watched = watch.add(child, on_message=on_message, on_exit=on_exit)
    try:
        # A stop request is passed on: the child stops waiting for the database.
        watch.until(lambda: bool(answers or ended) or lifecycle.stop_requested.is_set(),
                    poll=0.5)  # fmt: skip
        if not answers and not ended:
            watch.stop(watched)
            watch.until(lambda: bool(answers or ended))
    finally:
        child.stop()
    answer = answers[0] if answers else None
    if isinstance(answer, DatabaseReady):
        return answer
    if isinstance(answer, DatabaseNotReady) and not answer.stopped:
        raise UserError(answer.message)
    if lifecycle.stop_requested.is_set():
        raise DatabaseSetupStopped()
    how = ended[0] if ended else "stopped without an answer"
    raise UserError(
        f"could not get the database ready: its set-up process {how}; see {spec.log_file}"
    )


def run(channel) -> None:
    """Entry point of the ``database-setup`` child: wait, check, migrate, answer."""
    from sqlalchemy import exc

    from spawnflow.bootstrap import orm, outage
    from spawnflow.models import schema

    lifecycle.defer_warm_stop()  # a stop request ends the wait for the database instead
    try:
        outage.ride_out(lambda: orm.ping(create=True), what="connecting at start-up",
                        give_up=lifecycle.stop_requested.is_set)  # fmt: skip
        orm.require_writable()
        before, after = schema.migrate()
    except outage.GaveUp:
        channel.send(DatabaseNotReady(message="stopped", stopped=True))
    except UserError as error:
        channel.send(DatabaseNotReady(message=str(error)))
    except exc.SQLAlchemyError as error:
        channel.send(DatabaseNotReady(message=outage.explain(error)))
    else:
        channel.send(DatabaseReady(description=after.describe(),
                                   migrated=before != after.current))  # fmt: skip
