"""Expanding mapped tasks: once a mapped task may run, one task instance per element of
what it is mapped over, as Airflow does.

The run's one row for a mapped task (map index -1) waits and is decided like any other
(:mod:`~spawnflow.processors.scheduler.waiting`); when it is scheduled, in the same
transaction, it becomes element 0 and rows for elements 1..n-1 are added, all
``scheduled``. An empty list skips the task; a value that is not a list, or one the
scheduler cannot read, fails it with one sentence saying what it got. A mapped task
cleared whole expands again (:func:`spawnflow.services.runs.clear_task`): the rows of
its earlier instances are reused for the new list's indexes and removed past its end.
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
    earlier = _earlier_elements(session, run, task.task_id)
    try:
        values = {
            mapping.source_key(ref): _read(session, run.id, ref)
            for ref in mapping.references(task.expand)
        }
        elements = mapping.elements(task.expand, values)
    except ValueError as error:
        ti.state, ti.start_date, ti.end_date = TaskState.FAILED, now, now
        ti.reason = str(error)
        return 1 + _take_back(earlier, 0, task, now)
    if not elements:
        ti.state, ti.start_date, ti.end_date = TaskState.SKIPPED, now, now
        ti.reason = "it is mapped over an empty list"
        return 1 + _take_back(earlier, 0, task, now)
    ti.map_index = 0
    session.add_all(
        TaskInstance(
            dag_run_id=run.id, dag_id=run.dag_id, task_id=task.task_id, map_index=index,
            state=TaskState.SCHEDULED, try_number=0, max_tries=task.retries,
            **pool_columns(doc, task),
        )
        for index in range(1, len(elements)) if index not in earlier
    )  # fmt: skip
    return len(elements) + _take_back(earlier, len(elements), task, now)


def _take_back(earlier: dict[int, TaskInstance], count: int, task: serialize.SerializedTask,
               now: dt.datetime) -> int:  # fmt: skip
    """Reuse the rows of an earlier expansion for the ``count`` elements the new list
    has (their try numbers, and their logs, go on) and remove the others; how many of
    them changed. Rows not ``removed`` below ``count`` are left to run (one being stopped
    runs again once released)."""
    changed = 0
    for index, row in earlier.items():
        if index >= count and row.state not in TaskState.FINISHED:
            # Past the end of the new list: a running one's supervisor stops it.
            row.state, row.end_date = TaskState.REMOVED, now
            row.reason = "its mapped task expanded again over a shorter list"
            changed += 1
        elif index < count and row.state == TaskState.REMOVED:
            row.state, row.reason, row.end_date, row.next_try_at = (
                TaskState.SCHEDULED,
                None,
                None,
                None,
            )
            row.max_tries = row.try_number + task.retries
            changed += 1
    return changed


def _earlier_elements(session: Session, run: DagRun, task_id: str) -> dict[int, TaskInstance]:
    """The instances a mapped task had before it was cleared to expand again (see
    :func:`spawnflow.services.runs.clear_task`), by map index; the others than 0 kept
    their rows (``removed``, or still being stopped) so that their tries go on."""
    rows = session.scalars(
        select(TaskInstance).where(
            TaskInstance.dag_run_id == run.id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index > 0,
        )
    )
    return {row.map_index: row for row in rows}


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
