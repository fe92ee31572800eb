"""Reading a task's XCom in a run when the task may be mapped: an unmapped task's one
value, or the list of a mapped task's values in map-index order (Airflow's shape for
the downstream of a mapped task)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from spawnflow.comms.states import TaskState
from spawnflow.models.run import TaskInstance, XCom


@dataclass(frozen=True)
class RunXCom:
    """``value``: the JSON text (None: nothing pushed); ``reference``: where an XCom
    backend keeps the value instead (then ``value`` is None)."""

    value: str | None
    reference: str | None = None
    size: int = 0


def run_xcom(session: Session, dag_run_id: int, task_id: str, key: str) -> RunXCom:
    """The XCom ``key`` of ``task_id`` in the run. For a mapped task (instances with a
    map index of 0 or more) the JSON list of its instances' values in map-index order
    (``null`` for one that pushed none; ``removed`` ones, past the end of a shorter list,
    left out). ValueError if one of those values is kept by an XCom backend: the list is
    made of JSON texts, here, without the backend."""
    rows = session.execute(
        select(TaskInstance.map_index, XCom.value, XCom.reference, XCom.size)
        .select_from(TaskInstance)
        .outerjoin(XCom, (XCom.task_instance_id == TaskInstance.id) & (XCom.key == key))
        .where(
            TaskInstance.dag_run_id == dag_run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.state != TaskState.REMOVED,
        )
        .order_by(TaskInstance.map_index)
    ).all()
    mapped = [row for row in rows if row.map_index >= 0]
    if not mapped:
        row = rows[0] if rows else None
        if row is None or (row.value is None and row.reference is None):
            return RunXCom(None)
        return RunXCom(row.value, row.reference, row.size or 0)
    if any(row.reference is not None for row in mapped):
        raise ValueError(
            f"the results of mapped task {task_id!r} are kept by an XCom backend, which "
            "spawnflow cannot gather into a list yet; use the database backend for them"
        )
    return RunXCom("[" + ",".join(row.value or "null" for row in mapped) + "]")
