"""Expanding mapped tasks: once a mapped task may run, one task instance per element of
what it is mapped over, as Airflow does.

The run's one row for a mapped task (map index -1) waits and is decided like any other
(:mod:`~spawnflow.processors.scheduler.waiting`); when it is scheduled, in the same
transaction, it becomes element 0 and rows for elements 1..n-1 are added, all
``scheduled``. An empty list skips the task; a value that is not a list, or one the
scheduler cannot read, fails it with one sentence saying what it got.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.orm import Session

from spawnflow.comms.states import TaskState
from spawnflow.models.base import one_of
from spawnflow.models.mapped import run_xcom
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.processors.scheduler.runs import pool_columns
from spawnflow.sdk import mapping, serialize, xcom


def expand_scheduled(
    session: Session, run: DagRun, doc: serialize.SerializedDag, now: dt.datetime
) -> int:
    """Expand the run's mapped tasks that were just scheduled; how many rows changed or
    were added."""
    mapped = [task.task_id for task in doc.tasks if task.is_mapped]
    if not mapped:
        return 0
    rows = session.scalars(
        select(TaskInstance).where(
            TaskInstance.dag_run_id == run.id,
            TaskInstance.map_index == -1,
            TaskInstance.state == TaskState.SCHEDULED,
            one_of(session, TaskInstance.task_id, mapped),
        )
    ).all()
    changed = 0
    for ti in rows:
        changed += _expand(session, run, doc, doc.task(ti.task_id), ti, now)
    return changed


def _expand(session: Session, run: DagRun, doc: serialize.SerializedDag,
            task: serialize.SerializedTask, ti: TaskInstance, now: dt.datetime) -> int:  # fmt: skip
    assert task.expand is not None  # only mapped tasks come here
    try:
        values = {
            mapping.source_key(ref): _read(session, run.id, ref)
            for ref in mapping.references(task.expand)
        }
        elements = mapping.elements(task.expand, values)
    except ValueError as error:
        ti.state, ti.start_date, ti.end_date = TaskState.FAILED, now, now
        ti.reason = str(error)
        return 1
    if not elements:
        ti.state, ti.start_date, ti.end_date = TaskState.SKIPPED, now, now
        ti.reason = "it is mapped over an empty list"
        return 1
    ti.map_index = 0
    session.add_all(
        TaskInstance(
            dag_run_id=run.id, dag_id=run.dag_id, task_id=task.task_id, map_index=index,
            state=TaskState.SCHEDULED, try_number=0, max_tries=task.retries,
            **pool_columns(doc, task),
        )
        for index in range(1, len(elements))
    )  # fmt: skip
    return len(elements)


def _read(session: Session, dag_run_id: int, reference: dict[str, str]) -> object:
    """The value an upstream task pushed (a mapped one's list of values); ValueError, in
    one sentence, for one the scheduler cannot read."""
    task_id, key = reference["__xcom__"], reference.get("key", "return_value")
    found = run_xcom(session, dag_run_id, task_id, key)
    if found.reference is not None:
        raise ValueError(
            f"the output of task {task_id!r} is kept by an XCom backend, which the scheduler "
            "cannot read to expand a mapped task over it; use the database backend for it"
        )
    if found.value is None:
        return None
    try:
        return xcom.decode(found.value)
    except xcom.XComError as error:
        raise ValueError(f"the output of task {task_id!r}: {error}") from None
