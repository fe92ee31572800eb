"""What ``dags list``, ``runs list``, ``dags state`` and ``tasks states`` read, with
SQLAlchemy Core.

These commands only read rows, and run often (by hand, in scripts): they select from
:mod:`spawnflow.models.views` on a plain connection and never import the ORM or the
declarative models, which would cost more CPU than the rest of the command. Rows come
back with the same attribute names as the models'.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from sqlalchemy import Row, select

from spawnflow.bootstrap import orm
from spawnflow.models.views import dag, dag_run, task_instance
from spawnflow.services.records import no_run, require_dag, resolve_run_id


def list_dags(include_inactive: bool = False) -> Sequence[Row]:
    query = select(dag).order_by(dag.c.dag_id)
    if not include_inactive:
        query = query.where(dag.c.is_active.is_(True))
    with orm.engine().connect() as connection:
        return connection.execute(query).all()


def tags_of(row: Row) -> list[str]:
    return json.loads(row.tags or "[]")


def list_runs(dag_id: str | None = None, limit: int = 50) -> Sequence[Row]:
    """Runs, newest first; UnknownDag for a ``dag_id`` that has none and was never stored."""
    query = select(dag_run).order_by(dag_run.c.logical_date.desc(), dag_run.c.id.desc())
    if dag_id:
        query = query.where(dag_run.c.dag_id == dag_id)
    with orm.engine().connect() as connection:
        found = connection.execute(query.limit(limit)).all()
        if dag_id and not found:
            require_dag(connection, dag_id)
        return found


def find_run(dag_id: str, logical_date_or_run_id: str) -> Row:
    """The run of ``dag_id`` that the user named: by its run id, by its logical date
    (ISO 8601; without a zone, UTC), or by any spelling of its id that
    :func:`~spawnflow.services.records.resolve_run_id` takes, in that order."""
    spelling = logical_date_or_run_id
    of_dag = select(dag_run).where(dag_run.c.dag_id == dag_id)
    with orm.engine().connect() as connection:
        found = connection.execute(of_dag.where(dag_run.c.run_id == spelling)).first()
        moment = _moment(spelling)
        if found is None and moment is not None:
            dated = of_dag.where(dag_run.c.logical_date == moment).order_by(dag_run.c.id.desc())
            found = connection.execute(dated.limit(1)).first()
        if found is None:
            run_id = resolve_run_id(connection, dag_id, spelling)
            found = connection.execute(of_dag.where(dag_run.c.run_id == run_id)).first()
        if found is None:
            raise no_run(dag_id, spelling)
        return found


def _moment(text: str) -> dt.datetime | None:
    """``text`` as an aware datetime in UTC, if it is an ISO 8601 date or time."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC)


def task_instances(dag_id: str, run_id: str) -> Sequence[Row]:
    """The task instances of one run (any spelling of its id that
    :func:`~spawnflow.services.records.resolve_run_id` takes), in the order they were created
    (a mapped task's elements together, by map index)."""
    with orm.engine().connect() as connection:
        run_id = resolve_run_id(connection, dag_id, run_id)
        run = select(dag_run.c.id).where(dag_run.c.dag_id == dag_id, dag_run.c.run_id == run_id)
        found = connection.scalar(run)
        if found is None:
            raise no_run(dag_id, run_id)
        query = select(task_instance).where(task_instance.c.dag_run_id == found)
        rows = connection.execute(query.order_by(task_instance.c.id)).all()
    # A mapped task's elements are added when it is expanded: shown where its first
    # row is, in map-index order.
    first: dict[str, int] = {}
    for position, row in enumerate(rows):
        first.setdefault(row.task_id, position)
    return sorted(rows, key=lambda row: (first[row.task_id], row.map_index))
