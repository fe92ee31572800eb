"""Finding the records a command names, and the error when one is not there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError

if TYPE_CHECKING:
    from spawnflow.models.run import DagRun


class NotFound(UserError):
    """A run, task instance or Variable that does not exist."""


def no_run(dag_id: str, run_id: str) -> NotFound:
    """The error for a run that is not there, worded the same by every command."""
    return NotFound(f"Dag {dag_id!r} has no run {run_id!r}; see `spawnflow runs list`")


#: The run id that means a Dag's newest run.
LATEST = "latest"


def resolve_run_id(connection: Any, dag_id: str, spelling: str) -> str:
    """The run id a user meant by ``spelling``: the id itself; ``latest``, the Dag's
    newest run; the name of the run's log folder (``run_id=manual__2026-12-01T00_44_19.5~1f0c2a9e``,
    with or without ``run_id=``); or the start of exactly one of the Dag's run ids.

    Raises:
        NotFound: no run is meant, or a prefix starts several (they are named).
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
            raise NotFound(f"Dag {dag_id!r} has no run yet, so none is the latest")
        return newest
    folder = spelling.rstrip("/\\")
    folder = folder if folder.startswith("run_id=") else f"run_id={folder}"
    readable, hashed, _ = folder.removeprefix("run_id=").partition("~")
    if hashed:
        # The folder keeps the id's start, each unsafe character an "_": as a LIKE
        # pattern ("_" is any one character) it finds the ids it may stand for.
        candidates = connection.scalars(
            of_dag.where(dag_run.c.run_id.like(_literal(readable, keep="_") + "%", escape="!"))
        ).all()
        for run_id in candidates:
            if folder_name("run_id", run_id) == folder:
                return run_id
    starting = connection.scalars(
        of_dag.where(dag_run.c.run_id.like(_literal(spelling) + "%", escape="!"))
        .order_by(dag_run.c.run_id)
        .limit(6)
    ).all()
    if len(starting) == 1:
        return starting[0]
    if starting:
        shown = ", ".join(starting[:5]) + (", ..." if len(starting) > 5 else "")
        raise NotFound(f"{spelling!r} starts several runs of Dag {dag_id!r}: {shown}")
    raise no_run(dag_id, spelling)


def _literal(text: str, keep: str = "") -> str:
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
