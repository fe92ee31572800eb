"""What ``dags list``, ``runs list`` and ``tasks states`` read, with SQLAlchemy Core.

These commands only read rows, and run often (by hand, in scripts): they select from
:mod:`spawnflow.models.views` on a plain connection and never import the ORM or the
declarative models, which would cost more CPU than the rest of the command. Rows come
back with the same attribute names as the models'.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sqlalchemy import Row, select

from spawnflow.bootstrap import orm
from spawnflow.models.views import dag, dag_run, task_instance
from spawnflow.services.records import no_run, resolve_run_id


def list_dags(include_inactive: bool = False) -> Sequence[Row]:
    query = select(dag).order_by(dag.c.dag_id)
    if not include_inactive:
        query = query.where(dag.c.is_active.is_(True))
    with orm.engine().connect() as connection:
        return connection.execute(query).all()


def tags_of(row: Row) -> list[str]:
    return json.loads(row.tags or "[]")


def list_runs(dag_id: str | None = None, limit: int = 50) -> Sequence[Row]:
    """Runs, newest first."""
    query = select(dag_run).order_by(dag_run.c.logical_date.desc(), dag_run.c.id.desc())
    if dag_id:
        query = query.where(dag_run.c.dag_id == dag_id)
    with orm.engine().connect() as connection:
        return connection.execute(query.limit(limit)).all()


def task_instances(dag_id: str, run_id: str) -> Sequence[Row]:
    """The task instances of one run (any spelling of its id that
    :func:`~spawnflow.services.records.resolve_run_id` takes), in the order they were created."""
    with orm.engine().connect() as connection:
        run_id = resolve_run_id(connection, dag_id, run_id)
        run = select(dag_run.c.id).where(dag_run.c.dag_id == dag_id, dag_run.c.run_id == run_id)
        found = connection.scalar(run)
        if found is None:
            raise no_run(dag_id, run_id)
        query = select(task_instance).where(task_instance.c.dag_run_id == found)
        return connection.execute(query.order_by(task_instance.c.id)).all()
