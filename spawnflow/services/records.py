"""Finding the records a command names, and the error when one is not there."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec
from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError

if TYPE_CHECKING:
    from spawnflow.models.run import DagRun, TaskInstance


class NotFound(UserError):
    """A run, task instance or Variable that does not exist."""


class UnknownDag(NotFound):
    """A Dag id the Dag processor has not stored."""


def no_run(dag_id: str, run_id: str) -> NotFound:
    """The error for a run that is not there, worded the same by every command."""
    return NotFound(f"Dag {dag_id!r} has no run {run_id!r}; see `spawnflow runs list`")


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the known name closest to a mistyped one, or ``""``."""
    import difflib  # only on the way to an error

    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def require_dag(connection: Any, dag_id: str) -> None:
    """UnknownDag (see :func:`unknown_dag`) unless the Dag processor stored ``dag_id``."""
    from spawnflow.models.views import dag

    if connection.scalar(select(dag.c.dag_id).where(dag.c.dag_id == dag_id)) is None:
        raise unknown_dag(connection, dag_id)


def unknown_dag(connection: Any, dag_id: str) -> UnknownDag:
    """The error for a Dag id nobody stored, worded the same by every command that takes
    one: the file that may define it does not import, or a typo (did you mean), or
    where to look. ``connection`` is a Core connection or an ORM session."""
    from spawnflow.models.views import dag

    broken = _broken_file_that_may_define(connection, dag_id)
    if broken is not None:
        return UnknownDag(broken)
    hint = did_you_mean(dag_id, connection.scalars(select(dag.c.dag_id)).all())
    return UnknownDag(f"there is no Dag {dag_id!r}{hint or '; see `spawnflow dags list`'}")


def _broken_file_that_may_define(connection: Any, dag_id: str) -> str | None:
    """The sentence for a Dag that is missing because its file does not import: a file
    with an import error that is named after the Dag or spells its id in quotes."""
    from pathlib import Path

    from spawnflow.models.views import import_error

    query = select(import_error.c.fileloc, import_error.c.error).order_by(import_error.c.fileloc)
    for fileloc, error in connection.execute(query).all():
        path = Path(fileloc)
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            source = ""
        quoted = f'"{dag_id}"' in source or f"'{dag_id}'" in source
        if path.stem == dag_id or quoted:
            last = error.strip().splitlines()[-1] if error.strip() else "an error"
            return (
                f"there is no Dag {dag_id!r}: {path}, which may define it, does not import "
                f"({last}); see `spawnflow dags list-import-errors`"
            )
    return None


def unknown_task(connection: Any, dag_id: str, run_id: str, task_id: str) -> NotFound:
    """The error for a task the run has no instance of, with the closest task id (of
    the run's task instances, or of the stored Dag while the run has none yet)."""
    from spawnflow.models.views import dag_run, task_instance

    of_run = (
        select(task_instance.c.task_id)
        .join(dag_run, task_instance.c.dag_run_id == dag_run.c.id)
        .where(dag_run.c.dag_id == dag_id, dag_run.c.run_id == run_id)
    )
    known = connection.scalars(of_run).all() or stored_task_ids(connection, dag_id)
    hint = did_you_mean(task_id, known)
    return NotFound(f"run {run_id!r} of Dag {dag_id!r} has no task {task_id!r}{hint}")


class _Task(msgspec.Struct):
    task_id: str


class _Dag(msgspec.Struct):
    tasks: list[_Task]


class _Document(msgspec.Struct):
    """The part of a stored Dag document (:class:`spawnflow.sdk.serialize.DagDocument`)
    that holds its task ids; the rest is skipped unparsed."""

    dag: _Dag


def stored_task_ids(connection: Any, dag_id: str) -> list[str]:
    """The task ids of the stored Dag, in its order (``dags show``'s), read without the
    ORM or the SDK; none if the Dag is not stored."""
    from spawnflow.models.views import serialized_dag

    query = select(serialized_dag.c.data).where(serialized_dag.c.dag_id == dag_id)
    data = connection.scalar(query)
    if data is None:
        return []
    return [task.task_id for task in msgspec.json.decode(data, type=_Document).dag.tasks]


#: The run id that means a Dag's newest run.
LATEST = "latest"


def resolve_run_id(connection: Any, dag_id: str, spelling: str) -> str:
    """The run id a user meant by ``spelling``: the id itself; ``latest``, the Dag's
    newest run; the name of the run's log folder (``run_id=manual__2026-12-01T00_44_19.5~1f0c2a9e``,
    with or without ``run_id=``); or the start of exactly one of the Dag's run ids.

    Raises:
        NotFound: no run is meant, or a prefix starts several (they are named).
        UnknownDag: no run is meant, and the Dag processor stored no Dag ``dag_id``.
    """
    from spawnflow.bootstrap.paths import folder_name
    from spawnflow.models.views import dag_run

    of_dag = select(dag_run.c.run_id).where(dag_run.c.dag_id == dag_id)
    exact = connection.scalar(of_dag.where(dag_run.c.run_id == spelling))
    if exact is not None:
        return exact
    if spelling == LATEST:
        newest = connection.scalar(of_dag.order_by(dag_run.c.id.desc()).limit(1))
        if newest is None:
            require_dag(connection, dag_id)  # a Dag id with a typo has no run either
            raise NotFound(f"Dag {dag_id!r} has no run yet, so none is the latest")
        return newest
    folder = spelling.rstrip("/\\")
    folder = folder if folder.startswith("run_id=") else f"run_id={folder}"
    readable, hashed, _ = folder.removeprefix("run_id=").partition("~")
    if hashed:
        # The folder keeps the id's start, each unsafe character an "_": as a LIKE
        # pattern ("_" is any one character) it finds the ids it may stand for.
        candidates = connection.scalars(
            of_dag.where(dag_run.c.run_id.like(escape_like(readable, keep="_") + "%", escape="!"))
        ).all()
        for run_id in candidates:
            if folder_name("run_id", run_id) == folder:
                return run_id
    starting = connection.scalars(
        of_dag.where(dag_run.c.run_id.like(escape_like(spelling) + "%", escape="!"))
        .order_by(dag_run.c.run_id)
        .limit(6)
    ).all()
    if len(starting) == 1:
        return starting[0]
    if starting:
        shown = ", ".join(starting[:5]) + (", ..." if len(starting) > 5 else "")
        raise NotFound(f"{spelling!r} starts several runs of Dag {dag_id!r}: {shown}")
    require_dag(connection, dag_id)  # a Dag id with a typo has no run either
    raise no_run(dag_id, spelling)


def escape_like(text: str, keep: str = "") -> str:
    """``text`` for a LIKE pattern whose escape character is ``!`` (a backslash means
    something to MySQL's string literals too), matching itself only, but for the
    wildcards in ``keep``."""
    for special in ("!", "%", "_"):
        if special not in keep:
            text = text.replace(special, "!" + special)
    return text


def get_run(dag_id: str, run_id: str) -> DagRun:
    """The Dag's run that ``run_id`` names (see :func:`resolve_run_id`)."""
    # The model here, not at the top: the listing commands take NotFound from this
    # module without paying for the ORM (see spawnflow.services.listings).
    from spawnflow.models.run import DagRun

    with orm.session_scope(write=False) as session:
        run_id = resolve_run_id(session, dag_id, run_id)
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if run is None:
            raise no_run(dag_id, run_id)
        return run


def find_task_instance(
    session, dag_id: str, run_id: str, task_id: str, lock: bool = True, map_index: int = -1
) -> TaskInstance:
    """The task instance (instance ``map_index`` of a mapped task) of the run the user
    names (``latest``, a prefix, a log folder), locked unless ``lock`` is false;
    NotFound, in one sentence, for a run or task that does not exist, a mapped task
    without a map index (naming its indexes), or a map index for an unmapped task."""
    from spawnflow.models.run import DagRun, TaskInstance

    run_id = resolve_run_id(session, dag_id, run_id)  # latest, a prefix, a log folder
    query = (
        select(TaskInstance)
        .join(DagRun, TaskInstance.dag_run_id == DagRun.id)
        .where(DagRun.dag_id == dag_id, DagRun.run_id == run_id, TaskInstance.task_id == task_id)
    )
    ti = session.scalar(
        (query.with_for_update() if lock else query).where(TaskInstance.map_index == map_index)
    )
    if ti is None:
        get_run(dag_id, run_id)  # a missing run is named as such
        indexes = sorted(session.scalars(query.with_only_columns(TaskInstance.map_index)))
        if indexes and indexes != [-1]:
            raise NotFound(
                f"task {task_id!r} of run {run_id!r} is mapped: give --map-index, one of "
                f"{indexes[0]} to {indexes[-1]}"
                if map_index == -1
                else f"task {task_id!r} of run {run_id!r} has no map index {map_index}; it has "
                f"{indexes[0]} to {indexes[-1]}"
            )
        if indexes and map_index != -1:
            raise NotFound(
                f"task {task_id!r} of run {run_id!r} is not mapped: leave out --map-index"
            )
        raise unknown_task(session, dag_id, run_id, task_id)
    return ti


def task_instance(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> TaskInstance:
    """The task instance (instance ``map_index`` of a mapped task), read; NotFound, in
    one sentence, for a run or task that does not exist, a mapped task without a map
    index (naming its indexes), or a map index for an unmapped task."""
    with orm.session_scope(write=False) as session:
        return find_task_instance(session, dag_id, run_id, task_id, lock=False, map_index=map_index)
