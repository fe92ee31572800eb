"""Which task instances a branch or short-circuit task skips: decided by the task's
supervisor, which has the database, from what the task process reported it chose.

The rules are Airflow's (``SkipMixin.skip_all_except``, ``ShortCircuitOperator``): a
branch skips the tasks directly downstream of it that it did not choose and that are
not downstream of one it chose (``branch >> [a, join]; a >> join`` following ``a``
keeps ``join``); a short-circuit that returned a false value skips every task
downstream of it, or only the direct ones when it leaves the rest to their trigger
rules. The skips are written in the transaction that records the task's success, so
that no scheduler pass sees the success without them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from spawnflow.comms.states import TaskState
from spawnflow.comms.tasks import Follow
from spawnflow.models.dag import SerializedDagModel
from spawnflow.models.run import TaskInstance
from spawnflow.sdk import serialize

#: States a task instance may be skipped from: not started yet. One that runs already
#: (a trigger rule of ``always``) is left to end as it does.
_SKIPPABLE = (TaskState.NONE, TaskState.SCHEDULED)


class UnknownChoice(ValueError):
    """The task chose an id that is neither a task nor a task group of its Dag."""


def plan(doc: serialize.SerializedDag, task_id: str, follow: Follow) -> tuple[list[str], str]:
    """The ids of the tasks to skip, sorted, and the reason to record on them.

    Raises:
        UnknownChoice: naming the ids the Dag does not have.
    """
    chooser = doc.task(task_id)
    if chooser.kind == "short_circuit":
        why = f"short-circuit task {task_id!r} returned a false value"
        if follow.whole_downstream:
            return sorted(_downstream_of(doc, [task_id])), why
        return sorted(chooser.downstream), why
    chosen = _chosen_tasks(doc, task_id, follow.task_ids)
    kept = set(chosen) | _downstream_of(doc, chosen)
    skipped = sorted(set(chooser.downstream) - kept)
    named = ", ".join(repr(t) for t in follow.task_ids) or "none"
    return skipped, f"branch task {task_id!r} followed {named}"


def _chosen_tasks(doc: serialize.SerializedDag, task_id: str, ids: Iterable[str]) -> list[str]:
    """The task ids chosen; a group's id stands for its roots."""
    tasks, unknown = [], []
    for chosen in ids:
        if chosen in doc.task_index:
            tasks.append(chosen)
            continue
        members = {task.task_id for task in doc.tasks if chosen in task.groups}
        if not members:
            unknown.append(chosen)
        tasks += [m for m in sorted(members) if not set(doc.task(m).upstream) & members]
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        raise UnknownChoice(
            f"branch task {task_id!r} returned {names}, which Dag {doc.dag_id!r} has no task "
            "or task group of"
        )
    return tasks


def _downstream_of(doc: serialize.SerializedDag, task_ids: Iterable[str]) -> set[str]:
    """Every task downstream of ``task_ids``, however far."""
    found: set[str] = set()
    todo = list(task_ids)
    while todo:
        for downstream in doc.task(todo.pop()).downstream:
            if downstream not in found:
                found.add(downstream)
                todo.append(downstream)
    return found


def read_dag(session: Session, dag_id: str) -> serialize.SerializedDag | None:
    """The Dag as the scheduler knows it (its stored document), if it is stored."""
    data = session.scalars(
        select(SerializedDagModel.data).where(SerializedDagModel.dag_id == dag_id)
    ).first()
    return None if data is None else serialize.decode(data).dag


def skip(session: Session, dag_run_id: int, task_ids: list[str], reason: str,
         now: dt.datetime) -> None:  # fmt: skip
    """Mark the task instances of ``task_ids`` in the run skipped, if not started yet."""
    if not task_ids:
        return
    session.execute(
        update(TaskInstance)
        .where(TaskInstance.dag_run_id == dag_run_id, TaskInstance.task_id.in_(task_ids),
               TaskInstance.state.in_(_SKIPPABLE))
        .values(state=TaskState.SKIPPED, start_date=now, end_date=now, reason=reason)
        .execution_options(synchronize_session=False)
    )  # fmt: skip
