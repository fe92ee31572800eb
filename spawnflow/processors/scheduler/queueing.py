"""Hand scheduled task instances to the executor, within every concurrency limit.

Limits: the executor's free slots, ``[core] parallelism`` (queued plus running task
instances overall) and each Dag's ``max_active_tasks``. The scheduled rows are read
``FOR UPDATE SKIP LOCKED`` and marked queued in the same transaction, so a task
instance is queued by one scheduler only, once.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import startmethods
from spawnflow.bootstrap.paths import folder_name
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.states import RunType, TaskState
from spawnflow.comms.tasks import Workload
from spawnflow.models.dag import DagModel
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.processors.scheduler.asset_runs import triggering_events
from spawnflow.processors.scheduler.runs import DagBag, aware


def attempt_log(settings: Settings, dag_id: str, run_id: str, task_id: str, attempt: int) -> Path:
    """``<logs>/dag_id=…/run_id=…/task_id=…/attempt=N.log``, each id made safe as a folder
    name on every OS (see :func:`~spawnflow.bootstrap.paths.folder_name`)."""
    path = Path(settings.logging.base_log_folder).joinpath(
        folder_name("dag_id", dag_id), folder_name("run_id", run_id),
        folder_name("task_id", task_id), f"attempt={attempt}.log",
    )  # fmt: skip
    return platforms.usable_path(path)


def queue_tasks(
    session: Session, bag: DagBag, settings: Settings, free_slots: int, job_id: int,
    now: dt.datetime, only: set[int] | None = None,
) -> list[Workload]:  # fmt: skip
    """Mark up to the limits' worth of scheduled task instances queued; their workloads."""
    if free_slots <= 0:
        return []  # every worker busy: nothing to read
    active = TaskInstance.state.in_(TaskState.ACTIVE)
    per_dag: dict[str, int] = {
        dag_id: count for dag_id, count in session.execute(
            select(TaskInstance.dag_id, func.count()).where(active).group_by(TaskInstance.dag_id)
        )
    }  # fmt: skip
    room = min(free_slots, settings.core.parallelism - sum(per_dag.values()))
    if room <= 0:
        return []
    workloads: list[Workload] = []
    full: set[str] = set()
    # Dags at their max_active_tasks are left out of the query, so that they cannot
    # fill every candidate row while other Dags' tasks wait; one Dag can fill up
    # during a batch, hence a few rounds.
    for _ in range(3):
        full |= {
            dag_id for dag_id, count in per_dag.items() if count >= _limit(session, bag, dag_id)
        }
        query = select(TaskInstance).where(TaskInstance.state == TaskState.SCHEDULED)
        if only is not None:
            query = query.where(TaskInstance.dag_run_id.in_(only))
        if full:
            query = query.where(TaskInstance.dag_id.not_in(full))
        wanted = room - len(workloads)
        candidates = session.scalars(
            query.order_by(TaskInstance.id).limit(wanted * 4).with_for_update(skip_locked=True)
        ).all()
        for ti in candidates:
            if len(workloads) >= room:
                break
            workload = _queue_one(session, bag, settings, ti, per_dag, job_id, now)
            if workload is not None:
                workloads.append(workload)
        if len(workloads) >= room or len(candidates) < wanted * 4:
            break
    return workloads


def _limit(session: Session, bag: DagBag, dag_id: str) -> int:
    doc = bag.get(session, dag_id)
    return doc.max_active_tasks if doc is not None else 0


def _queue_one(
    session: Session, bag: DagBag, settings: Settings, ti: TaskInstance,
    per_dag: dict[str, int], job_id: int, now: dt.datetime,
) -> Workload | None:  # fmt: skip
    """Mark ``ti`` queued and return its workload; None if its Dag cannot take it now."""
    doc = bag.get(session, ti.dag_id)
    if doc is None or per_dag.get(ti.dag_id, 0) >= doc.max_active_tasks:
        return None
    try:
        task = doc.task(ti.task_id)
    except KeyError:  # the Dag changed since the task was scheduled
        ti.state, ti.end_date = TaskState.REMOVED, now
        ti.reason = "the task is no longer in the Dag"
        return None
    run = session.get(DagRun, ti.dag_run_id)
    model = session.get(DagModel, ti.dag_id)
    # Foreign keys: a task instance's run exists, and so does the run's Dag (the ti's).
    assert run is not None
    assert model is not None
    ti.state, ti.queued_at, ti.scheduler_job_id = TaskState.QUEUED, now, job_id
    per_dag[ti.dag_id] = per_dag.get(ti.dag_id, 0) + 1
    # A deferred try whose trigger fired resumes in the same try; others start the next.
    try_number = ti.try_number if ti.next_method is not None else ti.try_number + 1
    return Workload(
        ti_id=ti.id, dag_id=ti.dag_id, run_id=run.run_id, task_id=ti.task_id,
        try_number=try_number, dag_file=model.fileloc,
        dags_folder=str(settings.core.dags_folder),
        logical_date=aware(run.logical_date),
        data_interval_start=aware(run.data_interval_start),
        data_interval_end=aware(run.data_interval_end),
        conf=json.loads(run.conf or "{}"), params=doc.params,
        execution_timeout=task.execution_timeout, retry_delay=task.retry_delay,
        retry_exponential_backoff=task.retry_exponential_backoff,
        max_retry_delay=task.max_retry_delay, max_tries=ti.max_tries,
        callbacks=list(task.callbacks),
        log_file=str(attempt_log(settings, ti.dag_id, run.run_id, ti.task_id, try_number)),
        outlets=list(task.outlets), partition_key=run.partition_key,
        multiprocessing_start_method=_task_multiprocessing(settings), queue=task.queue,
        triggering_asset_events=(
            triggering_events(session, run.id) if run.run_type == RunType.ASSET_TRIGGERED else {}
        ),
        next_method=ti.next_method, next_kwargs=ti.next_kwargs,
    )  # fmt: skip


def _task_multiprocessing(settings: Settings) -> str | None:
    """The task's own ``multiprocessing`` default: None keeps Python's; ``same`` makes
    it the task process's start method (``[executor] task_mp_start_method``)."""
    if settings.executor.task_mp_start_method == "same":
        return startmethods.for_role(settings, "task")[0]
    return None
