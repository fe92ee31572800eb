"""Dag runs and task instance states: what the scheduler decides in each loop.

Everything works from serialized Dags; no Dag file is ever imported here. Rows the
decisions change are read ``FOR UPDATE SKIP LOCKED`` on PostgreSQL and MySQL/MariaDB,
so that two schedulers on one database never decide about the same row at once
(SQLite ignores the clause and runs one scheduler).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any, overload

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from spawnflow.comms import retries
from spawnflow.comms.states import DagRunState, RunType, TaskState
from spawnflow.models.backfill import Backfill
from spawnflow.models.base import one_of
from spawnflow.models.dag import DagModel, SerializedDagModel
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.models.triggers import end_deferral
from spawnflow.processors.scheduler.timetable import Interval, next_interval
from spawnflow.sdk import serialize
from spawnflow.sdk.schedule import zone_from_name


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@overload
def aware(moment: dt.datetime) -> dt.datetime: ...
@overload
def aware(moment: dt.datetime | None) -> dt.datetime | None: ...
def aware(moment: dt.datetime | None) -> dt.datetime | None:
    """A stored time as an aware UTC datetime (SQLite and MySQL hand back naive ones)."""
    if moment is None:
        return None
    return moment.astimezone(dt.UTC) if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


class DagBag:
    """Serialized Dags, decoded once per version.

    Each Dag's hash is read once per session (the unit of work sees one version of
    it); the document itself only when the hash changed.
    """

    def __init__(self) -> None:
        self._cache: dict[str, tuple[str, serialize.SerializedDag]] = {}

    def prefetch(self, session: Session, dag_ids: Iterable[str]) -> None:
        """Check many Dags' hashes in one statement (and read the documents that changed
        in one more): :meth:`get` then costs no statement for them in this session."""
        checked: set[str] = session.info.setdefault("spawnflow.dags_checked", set())
        todo = sorted(set(dag_ids) - checked)
        if not todo:
            return
        hashes: dict[str, str] = {
            dag_id: dag_hash
            for dag_id, dag_hash in session.execute(
                select(SerializedDagModel.dag_id, SerializedDagModel.dag_hash)
                .where(one_of(session, SerializedDagModel.dag_id, todo))
            )
        }  # fmt: skip
        stale = [d for d in hashes if d not in self._cache or self._cache[d][0] != hashes[d]]
        if stale:
            for dag_id, dag_hash, data in session.execute(
                select(SerializedDagModel.dag_id, SerializedDagModel.dag_hash,
                       SerializedDagModel.data)
                .where(one_of(session, SerializedDagModel.dag_id, stale))
            ):  # fmt: skip
                self._cache[dag_id] = (dag_hash, serialize.decode(data).dag)
        for dag_id in todo:
            if dag_id not in hashes:
                self._cache.pop(dag_id, None)
            checked.add(dag_id)

    def get(self, session: Session, dag_id: str) -> serialize.SerializedDag | None:
        checked: set[str] = session.info.setdefault("spawnflow.dags_checked", set())
        cached = self._cache.get(dag_id)
        if dag_id in checked:
            return cached[1] if cached is not None else None
        where = SerializedDagModel.dag_id == dag_id
        dag_hash = session.scalar(select(SerializedDagModel.dag_hash).where(where))
        checked.add(dag_id)
        if dag_hash is None:
            self._cache.pop(dag_id, None)
            return None
        if cached is None or cached[0] != dag_hash:
            row = session.execute(
                select(SerializedDagModel.dag_hash, SerializedDagModel.data).where(where)
            ).first()
            if row is None:  # deleted since we read its hash
                self._cache.pop(dag_id, None)
                return None
            cached = self._cache[dag_id] = (row.dag_hash, serialize.decode(row.data).dag)
        return cached[1]


def create_due_runs(session: Session, bag: DagBag, now: dt.datetime) -> int:
    """Create the next scheduled run of every Dag that is due one; how many were made."""
    dags = session.scalars(
        select(DagModel)
        .where(DagModel.is_active.is_(True), DagModel.is_paused.is_(False))
        .order_by(DagModel.dag_id)
        .with_for_update(skip_locked=True)
    ).all()
    created = 0
    for model in dags:
        doc = bag.get(session, model.dag_id)
        if doc is None or doc.schedule.kind in ("manual", "assets"):
            continue  # triggered, or asset-triggered (see asset_runs)
        # A backfill's runs count against the backfill's own limit, not the Dag's.
        active = session.scalar(
            select(func.count()).where(
                DagRun.dag_id == model.dag_id, DagRun.state.in_(DagRunState.ACTIVE),
                DagRun.backfill_id.is_(None),
            )
        )  # fmt: skip
        assert active is not None  # COUNT(*) always returns a row
        if active >= doc.max_active_runs:
            continue
        interval = _next_unbackfilled(session, doc, model.dag_id, now)
        if interval is None:
            continue
        session.add(DagRun(
            dag_id=model.dag_id, run_id=f"scheduled__{interval.start.isoformat()}",
            run_type=RunType.SCHEDULED, state=DagRunState.QUEUED, logical_date=interval.start,
            data_interval_start=interval.start, data_interval_end=interval.end, conf="{}",
        ))  # fmt: skip
        created += 1
    return created


def _next_unbackfilled(
    session: Session, doc: serialize.SerializedDag, dag_id: str, now: dt.datetime
) -> Interval | None:
    """The next due interval of the Dag's schedule, past those whose logical date a
    backfill already ran (a date gets one run: the schedule goes on after them)."""
    zone = zone_from_name(doc.timezone)
    last = last_scheduled(session, dag_id)
    interval = next_interval(doc.schedule, doc.start_date, doc.end_date, doc.catchup, last,
                             now, zone)  # fmt: skip
    if interval is None:
        return None
    backfilled = {
        aware(moment) for moment in session.scalars(
            select(DagRun.logical_date).where(
                DagRun.dag_id == dag_id, DagRun.run_type == RunType.BACKFILL,
                DagRun.logical_date >= interval.start,
            )
        )
    }  # fmt: skip
    while interval is not None and interval.start in backfilled:
        interval = next_interval(doc.schedule, doc.start_date, doc.end_date, doc.catchup,
                                 interval.start, now, zone)  # fmt: skip
    return interval


def last_scheduled(session: Session, dag_id: str) -> dt.datetime | None:
    """The logical date of the Dag's newest scheduled run (the schedule goes on from it)."""
    last = session.scalar(
        select(func.max(DagRun.logical_date)).where(
            DagRun.dag_id == dag_id, DagRun.run_type == RunType.SCHEDULED
        )
    )
    return aware(last)


def trigger_run(
    session: Session, dag_id: str, conf: dict[str, Any] | None = None, *,
    logical_date: dt.datetime | None = None, run_id: str | None = None,
) -> DagRun:  # fmt: skip
    """Create a manual run of ``dag_id`` (it starts as queued)."""
    moment = logical_date or utcnow()
    run = DagRun(
        dag_id=dag_id, run_id=run_id or f"manual__{moment.isoformat()}", run_type=RunType.MANUAL,
        state=DagRunState.QUEUED, logical_date=moment, data_interval_start=moment,
        data_interval_end=moment, conf=json.dumps(conf or {}),
    )  # fmt: skip
    session.add(run)
    session.flush()
    return run


def start_queued_runs(
    session: Session, bag: DagBag, now: dt.datetime, only: set[int] | None
) -> int:
    """Move queued runs to running within ``max_active_runs``; create their task instances."""
    query = select(DagRun).where(DagRun.state == DagRunState.QUEUED)
    if only is not None:
        query = query.where(DagRun.id.in_(only))
    queued = session.scalars(
        query.order_by(DagRun.logical_date, DagRun.id).with_for_update(skip_locked=True)
    ).all()
    started = 0
    backfill_limits: dict[int, int] = {}
    for run in queued:
        doc = bag.get(session, run.dag_id)
        if doc is None:
            continue
        # A backfill's runs start within the backfill's max_active_runs, the Dag's
        # other runs within the Dag's: neither holds up the other.
        alike: ColumnElement[bool]
        if run.backfill_id is None:
            limit, alike = doc.max_active_runs, DagRun.backfill_id.is_(None)
        else:
            if run.backfill_id not in backfill_limits:
                backfill_limits[run.backfill_id] = session.scalar(
                    select(Backfill.max_active_runs).where(Backfill.id == run.backfill_id)
                ) or 1  # fmt: skip
            limit, alike = backfill_limits[run.backfill_id], DagRun.backfill_id == run.backfill_id
        running = session.scalar(
            select(func.count()).where(
                DagRun.dag_id == run.dag_id, DagRun.state == DagRunState.RUNNING, alike
            )
        )
        assert running is not None  # COUNT(*) always returns a row
        if running >= limit:
            continue
        run.state, run.start_date = DagRunState.RUNNING, now
        existing = set(session.scalars(
            select(TaskInstance.task_id).where(TaskInstance.dag_run_id == run.id)
        ))  # fmt: skip
        for task in doc.tasks:
            if task.task_id not in existing:
                session.add(TaskInstance(
                    dag_run_id=run.id, dag_id=run.dag_id, task_id=task.task_id,
                    state=TaskState.NONE, try_number=0, max_tries=task.retries,
                    **pool_columns(doc, task),
                ))  # fmt: skip
        started += 1
    return started


def pool_columns(doc: serialize.SerializedDag, task: serialize.SerializedTask) -> dict[str, Any]:
    """A new task instance's pool, pool slots and effective priority weight."""
    return {
        "pool": task.pool, "pool_slots": task.pool_slots,
        "priority_weight": doc.priority_weights[task.task_id],
    }  # fmt: skip


def fail_stale_tasks(
    session: Session,
    bag: DagBag,
    now: dt.datetime,
    timeout: float,
    database_back_at: dt.datetime | None = None,
) -> list[TaskInstance]:
    """Running task instances whose supervisor stopped heartbeating: failed, or retried.

    A cleared one (``restarting``) whose supervisor is gone may simply run again. After
    an outage of the database (which the scheduler saw end at ``database_back_at``) no
    heartbeat could be written meanwhile: supervisors get ``timeout`` from its return.
    """
    if database_back_at is not None and now - database_back_at < dt.timedelta(seconds=timeout):
        return []
    limit = now - dt.timedelta(seconds=timeout)
    stale = session.scalars(
        select(TaskInstance)
        .where(TaskInstance.state.in_((TaskState.RUNNING, TaskState.RESTARTING)),
               TaskInstance.last_heartbeat < limit)
        .with_for_update(skip_locked=True)
    ).all()  # fmt: skip
    for ti in stale:
        if ti.state == TaskState.RESTARTING:
            ti.state, ti.task_pid = TaskState.NONE, None
            end_deferral(ti)
            continue
        reason = f"no heartbeat for {timeout:g} seconds: its supervisor is gone"
        fail(ti, now, reason, retry_delay(session, bag, ti))
    return [ti for ti in stale if ti.state != TaskState.NONE]


def retry_delay(session: Session, bag: DagBag, ti: TaskInstance) -> float:
    """Seconds the current try of ``ti`` waits before the next if it fails: its task's
    retry_delay, or the backoff for this try (0 for a task no longer in its Dag)."""
    doc = bag.get(session, ti.dag_id)
    try:
        task = doc.task(ti.task_id) if doc else None
    except KeyError:
        task = None
    if task is None:
        return 0.0
    return retries.retry_wait(
        task.retry_delay, ti.try_number, exponential_backoff=task.retry_exponential_backoff,
        max_retry_delay=task.max_retry_delay,
        key=retries.try_key(ti.dag_id, ti.task_id, ti.id, ti.try_number),
    )  # fmt: skip


def fail(ti: TaskInstance, now: dt.datetime, reason: str, retry_delay: float = 0.0) -> None:
    """End the current try of ``ti`` as failed, or up_for_retry if it has tries left."""
    if ti.try_number <= ti.max_tries and ti.try_number > 0:
        ti.state = TaskState.UP_FOR_RETRY
        ti.next_try_at = now + dt.timedelta(seconds=retry_delay)
    else:
        ti.state = TaskState.FAILED
    ti.reason, ti.end_date = reason, now
    end_deferral(ti)


def fail_timed_out_deferrals(session: Session, bag: DagBag, now: dt.datetime,
                             only: set[int] | None) -> list[TaskInstance]:  # fmt: skip
    """Deferred task instances whose trigger did not fire within its timeout: their try
    fails (or is retried) with a reason that says so."""
    query = select(TaskInstance).where(
        TaskInstance.state == TaskState.DEFERRED, TaskInstance.trigger_timeout < now
    )
    if only is not None:
        query = query.where(TaskInstance.dag_run_id.in_(only))
    late = session.scalars(query.with_for_update(skip_locked=True)).all()
    for ti in late:
        ended = aware(ti.trigger_timeout)
        assert ended is not None  # the query asked for one
        reason = (f"the trigger did not fire within the deferral's timeout, which passed at "
                  f"{ended:%Y-%m-%d %H:%M:%S} UTC")  # fmt: skip
        fail(ti, now, reason, retry_delay(session, bag, ti))
    return list(late)
