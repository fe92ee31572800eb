"""Hand scheduled task instances to the executor, within every concurrency limit.

Limits: the executor's free slots, ``[core] parallelism`` (queued plus running task
instances overall), each Dag's ``max_active_tasks`` and each pool's slots. The
scheduled rows are read ``FOR UPDATE SKIP LOCKED`` and marked queued in the same
transaction, so a task instance is queued by one scheduler only, once. Candidates come
heaviest effective priority weight first, then by logical date, then by task id.

Pools: the transaction first locks every pool row (``SELECT ... FOR UPDATE``, in name
order so that two schedulers cannot deadlock), then counts the slots in use and queues.
A second scheduler waits on those locks until the first commits, and then counts the
task instances the first queued: two schedulers never hand out the same free slot.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from sqlalchemy import ColumnElement, and_, func, or_, select, update
from sqlalchemy.orm import Session

from spawnflow.bootstrap import remote_logs, startmethods
from spawnflow.bootstrap.paths import folder_name
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.states import RunType, TaskState
from spawnflow.comms.tasks import Workload
from spawnflow.models.dag import DagModel
from spawnflow.models.pool import Pool
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.processors.scheduler.asset_runs import triggering_events
from spawnflow.processors.scheduler.runs import DagBag, aware


def attempt_log_key(dag_id: str, run_id: str, task_id: str, attempt: int,
                    map_index: int = -1) -> str:  # fmt: skip
    """``dag_id=…/run_id=…/task_id=…/attempt=N.log`` (``…/task_id=…/map_index=M/
    attempt=N.log`` for an element of a mapped task): a try's log relative to a
    ``[logging] base_log_folder`` (or ``remote_base_url``), each id made safe as a folder
    name on every OS (see :func:`~spawnflow.bootstrap.paths.folder_name`)."""
    parts = [folder_name("dag_id", dag_id), folder_name("run_id", run_id),
             folder_name("task_id", task_id)]  # fmt: skip
    if map_index >= 0:
        parts.append(f"map_index={map_index}")
    return "/".join([*parts, f"attempt={attempt}.log"])


def attempt_log(settings: Settings, dag_id: str, run_id: str, task_id: str, attempt: int,
                map_index: int = -1) -> Path:  # fmt: skip
    """A try's log file under this machine's ``[logging] base_log_folder``."""
    key = attempt_log_key(dag_id, run_id, task_id, attempt, map_index)
    return remote_logs.local_path(settings, key)


def queue_tasks(
    session: Session, bag: DagBag, settings: Settings, free_slots: int, job_id: int,
    now: dt.datetime, only: set[int] | None = None,
) -> list[Workload]:  # fmt: skip
    """Mark up to the limits' worth of scheduled task instances queued; their workloads."""
    if free_slots <= 0:
        return []  # every worker busy: nothing to read
    # First: a lock taken after a read in this transaction would count stale rows.
    pools = {pool.pool: pool for pool in session.scalars(
        select(Pool).order_by(Pool.pool).with_for_update()
    )}  # fmt: skip
    active = TaskInstance.state.in_(TaskState.ACTIVE)
    per_dag: dict[str, int] = {
        dag_id: count for dag_id, count in session.execute(
            select(TaskInstance.dag_id, func.count()).where(active).group_by(TaskInstance.dag_id)
        )
    }  # fmt: skip
    room = min(free_slots, settings.core.parallelism - sum(per_dag.values()))
    if room <= 0:
        return []
    # For max_active_tis_per_dag; counted after the pool rows are locked, as the pools'
    # use is, so that two schedulers never both take a task's last place.
    per_task: dict[tuple[str, str], int] = {
        (dag_id, task_id): count for dag_id, task_id, count in session.execute(
            select(TaskInstance.dag_id, TaskInstance.task_id, func.count())
            .where(active).group_by(TaskInstance.dag_id, TaskInstance.task_id)
        )
    }  # fmt: skip
    used = pool_usage(session, pools)
    pool_room = {name: pool.slots - used.get(name, 0) for name, pool in pools.items()}
    _explain_missing_pools(session, pools)
    workloads: list[Workload] = []
    full: set[str] = set()
    logical_date = (
        select(DagRun.logical_date).where(DagRun.id == TaskInstance.dag_run_id).scalar_subquery()
    )
    # Dags at their max_active_tasks and full pools are left out of the query, so that
    # they cannot fill every candidate row while other tasks wait; one can fill up
    # during a batch, hence a few rounds.
    for _ in range(3):
        full |= {
            dag_id for dag_id, count in per_dag.items() if count >= _limit(session, bag, dag_id)
        }
        open_pools = [name for name, free in pool_room.items() if free > 0]
        query = select(TaskInstance).where(
            TaskInstance.state == TaskState.SCHEDULED, TaskInstance.pool.in_(open_pools)
        )
        if only is not None:
            query = query.where(TaskInstance.dag_run_id.in_(only))
        if full:
            query = query.where(TaskInstance.dag_id.not_in(full))
        wanted = room - len(workloads)
        candidates = session.scalars(
            query.order_by(
                TaskInstance.priority_weight.desc(), logical_date, TaskInstance.task_id,
                TaskInstance.map_index, TaskInstance.id,
            ).limit(wanted * 4).with_for_update(skip_locked=True)
        ).all()  # fmt: skip
        for ti in candidates:
            if len(workloads) >= room:
                break
            workload = _queue_one(
                session, bag, settings, ti, (per_dag, per_task), pool_room, job_id, now
            )
            if workload is not None:
                workloads.append(workload)
        if len(workloads) >= room or len(candidates) < wanted * 4:
            break
    return workloads


def pool_usage(session: Session, pools: dict[str, Pool]) -> dict[str, int]:
    """Slots in use per pool: ``pool_slots`` of queued and running task instances, and of
    deferred ones in pools that count them."""
    counted: ColumnElement[bool] = TaskInstance.state.in_(TaskState.ACTIVE)
    deferring = [name for name, pool in pools.items() if pool.include_deferred]
    if deferring:
        counted = or_(counted, and_(TaskInstance.state == TaskState.DEFERRED,
                                    TaskInstance.pool.in_(deferring)))  # fmt: skip
    rows = session.execute(
        select(TaskInstance.pool, func.sum(TaskInstance.pool_slots))
        .where(counted).group_by(TaskInstance.pool)
    )  # fmt: skip
    return {name: int(used or 0) for name, used in rows}


def missing_pool_reason(pool: str) -> str:
    """Why a scheduled task instance whose pool does not exist waits."""
    return f"pool {pool!r} does not exist; create it with `spawnflow pools set {pool} SLOTS`"


def _explain_missing_pools(session: Session, pools: dict[str, Pool]) -> None:
    """Scheduled task instances in a pool nobody created stay scheduled, saying why.

    Only rows whose reason differs are written, so a waiting task does not bump its
    ``row_version`` (and wake its run's examination) every pass."""
    scheduled = TaskInstance.state == TaskState.SCHEDULED
    missing = session.scalars(
        select(TaskInstance.pool).distinct().where(scheduled, TaskInstance.pool.not_in(pools))
    ).all()
    for name in missing:
        reason = missing_pool_reason(name)
        session.execute(
            update(TaskInstance)
            .where(scheduled, TaskInstance.pool == name,
                   or_(TaskInstance.reason.is_(None), TaskInstance.reason != reason))
            .values(reason=reason)
            .execution_options(synchronize_session=False)
        )  # fmt: skip


def _limit(session: Session, bag: DagBag, dag_id: str) -> int:
    doc = bag.get(session, dag_id)
    return doc.max_active_tasks if doc is not None else 0


def _queue_one(
    session: Session, bag: DagBag, settings: Settings, ti: TaskInstance,
    active: tuple[dict[str, int], dict[tuple[str, str], int]], pool_room: dict[str, int],
    job_id: int, now: dt.datetime,
) -> Workload | None:  # fmt: skip
    """Mark ``ti`` queued and return its workload; None if its Dag, its task's
    ``max_active_tis_per_dag`` or its pool cannot take it now. ``active``: the queued and
    running task instances per Dag and per (Dag, task)."""
    per_dag, per_task = active
    doc = bag.get(session, ti.dag_id)
    if doc is None or per_dag.get(ti.dag_id, 0) >= doc.max_active_tasks:
        return None
    try:
        task = doc.task(ti.task_id)
    except KeyError:  # the Dag changed since the task was scheduled
        ti.state, ti.end_date = TaskState.REMOVED, now
        ti.reason = "the task is no longer in the Dag"
        return None
    bound = task.max_active_tis_per_dag
    if bound is not None and per_task.get((ti.dag_id, ti.task_id), 0) >= bound:
        return None
    if (ti.pool, ti.pool_slots) != (task.pool, task.pool_slots):  # the Dag changed
        ti.pool, ti.pool_slots = task.pool, task.pool_slots
    if pool_room.get(ti.pool, 0) < ti.pool_slots:
        return None  # a missing pool's reason is written by _explain_missing_pools
    pool_room[ti.pool] -= ti.pool_slots
    if ti.reason is not None and ti.reason.endswith(" SLOTS`"):  # its pool was missing
        ti.reason = None
    run = session.get(DagRun, ti.dag_run_id)
    model = session.get(DagModel, ti.dag_id)
    # Foreign keys: a task instance's run exists, and so does the run's Dag (the ti's).
    assert run is not None
    assert model is not None
    ti.state, ti.queued_at, ti.scheduler_job_id = TaskState.QUEUED, now, job_id
    per_dag[ti.dag_id] = per_dag.get(ti.dag_id, 0) + 1
    per_task[ti.dag_id, ti.task_id] = per_task.get((ti.dag_id, ti.task_id), 0) + 1
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
        log_file=attempt_log_key(ti.dag_id, run.run_id, ti.task_id, try_number, ti.map_index),
        map_index=ti.map_index,
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
