"""Finding the records a command names, and the error when one is not there."""

from __future__ import annotations

from typing import TYPE_CHECKING

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


def get_run(dag_id: str, run_id: str) -> DagRun:
    # The model here, not at the top: the listing commands take NotFound from this
    # module without paying for the ORM (see spawnflow.services.listings).
    from spawnflow.models.run import DagRun

    with orm.session_scope(write=False) as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if run is None:
            raise no_run(dag_id, run_id)
        return run
