"""Finding the records a command names, and the error when one is not there."""

from __future__ import annotations

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError
from spawnflow.models.run import DagRun


class NotFound(UserError):
    """A run, task instance or Variable that does not exist."""


def get_run(dag_id: str, run_id: str) -> DagRun:
    with orm.session_scope(write=False) as session:
        run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        if run is None:
            raise NotFound(f"Dag {dag_id!r} has no run {run_id!r}; see `spawnflow runs list`")
        return run
