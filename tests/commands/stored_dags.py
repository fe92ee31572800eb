"""Dags stored as the Dag processor stores them, without parsing a file: for the
command tests that read a Dag's schedule or tasks."""

from __future__ import annotations

import datetime as dt

from spawnflow import CommandTask, Dag
from spawnflow.models import DagModel, DagRun
from spawnflow.models.dag import SerializedDagModel
from spawnflow.sdk import serialize


def store(session, dag_id: str, tasks: list[str], *, paused: bool = False,
          model: bool = True, **dag_args) -> None:  # fmt: skip
    """Store Dag ``dag_id`` with ``tasks`` (each after the one before) and ``dag_args``;
    ``model=False`` when its DagModel row is there already."""
    with Dag(dag_id, **dag_args) as dag:
        previous = None
        for task_id in tasks:
            current = CommandTask(task_id, "true")
            if previous is not None:
                previous >> current
            previous = current
    document = serialize.serialize(dag)
    if model:
        session.add(DagModel(dag_id=dag_id, fileloc=f"/dags/{dag_id}.py", is_paused=paused,
                             schedule=document.schedule.describe()))  # fmt: skip
        session.flush()
    data = serialize.encode(serialize.DagDocument(serialize.VERSION, document, "0" * 64))
    session.add(SerializedDagModel(dag_id=dag_id, data=data.decode(),
                                   dag_hash=serialize.dag_hash(document)))  # fmt: skip


def scheduled_run(session, dag_id: str, logical_date: dt.datetime) -> None:
    """A scheduled run of ``dag_id`` at ``logical_date``, finished."""
    run_id = f"scheduled__{logical_date.isoformat()}"
    session.add(DagRun(dag_id=dag_id, run_id=run_id, run_type="scheduled", state="success",
                       logical_date=logical_date))  # fmt: skip
