"""What shell completion offers: Dag ids, task ids and run ids, read with SQLAlchemy Core.

A completion runs on every Tab press, so it reads as the listing commands do (plain
Core selects of :mod:`spawnflow.models.views`, no ORM, no models, no Alembic) and
decodes only the task ids of a stored Dag. A database that is missing, unmigrated or
out of reach offers nothing; :mod:`spawnflow.commands.completion` makes sure of that.
"""

from __future__ import annotations

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.models.views import dag, dag_run
from spawnflow.services.records import LATEST, escape_like, stored_task_ids

#: The most ids one completion offers: a shell lists them all, and more help nobody.
MOST = 200


def dag_ids(prefix: str) -> list[str]:
    """The ids of the active Dags that start with ``prefix``."""
    query = (
        select(dag.c.dag_id)
        .where(dag.c.is_active.is_(True), dag.c.dag_id.like(escape_like(prefix) + "%", escape="!"))
        .order_by(dag.c.dag_id)
        .limit(MOST)
    )
    with orm.engine().connect() as connection:
        found = connection.scalars(query).all()
    return [dag_id for dag_id in found if dag_id.startswith(prefix)]  # MySQL's LIKE ignores case


def task_ids(dag_id: str, prefix: str) -> list[str]:
    """The task ids of the stored Dag ``dag_id`` that start with ``prefix``, in the
    Dag's order (as ``dags show`` lists them)."""
    with orm.engine().connect() as connection:
        found = stored_task_ids(connection, dag_id)
    return [task_id for task_id in found if task_id.startswith(prefix)]


def run_ids(dag_id: str, prefix: str) -> list[str]:
    """The run ids of ``dag_id`` that start with ``prefix``, newest first, then
    ``latest`` if it starts so too and the Dag has a run."""
    of_dag = select(dag_run.c.run_id).where(dag_run.c.dag_id == dag_id)
    starting = of_dag.where(dag_run.c.run_id.like(escape_like(prefix) + "%", escape="!"))
    with orm.engine().connect() as connection:
        found = connection.scalars(starting.order_by(dag_run.c.id.desc()).limit(MOST)).all()
        found = [run_id for run_id in found if run_id.startswith(prefix)]
        if LATEST.startswith(prefix) and (found or connection.scalar(of_dag.limit(1))):
            found.append(LATEST)
    return found
