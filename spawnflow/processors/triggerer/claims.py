"""The triggerer's reads and writes: which triggers it runs, and what their events do.

A trigger belongs to the triggerer whose job id its row holds. A triggerer claims rows
that nobody holds, or whose triggerer stopped heartbeating, up to its capacity, with
``FOR UPDATE SKIP LOCKED`` on PostgreSQL and MariaDB (SQLite has one writer): two
triggerers never claim one row. An event resumes the deferred task instances waiting
on the trigger, conditionally on their still being deferred on it, so a trigger that
fires twice (run again after its triggerer died) resumes its task once.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlalchemy import delete, exists, func, or_, select, update
from sqlalchemy.orm import Session

from spawnflow.bootstrap import logs
from spawnflow.comms.states import JobState, TaskState
from spawnflow.comms.triggers import TriggerFired
from spawnflow.models import asset_events
from spawnflow.models.assets import AssetEvent, AssetModel
from spawnflow.models.job import Job, utcnow
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.models.triggers import AssetStateValue, Trigger
from spawnflow.processors.scheduler import runs
from spawnflow.sdk import xcom

JOB_TYPE = "triggerer"
log = logs.get_logger("spawnflow.triggerer")


@dataclass(frozen=True)
class Assigned:
    """A trigger this triggerer runs, with who waits for it."""

    trigger_id: int
    classpath: str
    kwargs: str
    owner: str
    asset_uri: str | None


def alive_triggerers(session: Session, now: dt.datetime, timeout: float) -> list[int]:
    """The ids of triggerers that heartbeat within ``timeout`` (a plain read, apart from
    the locking one: a locking read must not lock or skip the job rows it looks at)."""
    return list(session.scalars(select(Job.id).where(
        Job.job_type == JOB_TYPE, Job.state == JobState.RUNNING,
        Job.latest_heartbeat >= now - dt.timedelta(seconds=timeout),
    )))  # fmt: skip


def _waited_for(only_runs: set[int] | None) -> Any:
    """Triggers someone waits for: a deferred task instance, or an asset (watchers)."""
    deferred = exists().where(
        TaskInstance.trigger_id == Trigger.id, TaskInstance.state == TaskState.DEFERRED
    )
    if only_runs is not None:  # ``dags test``: this run's tasks only, no watchers
        return exists().where(
            TaskInstance.trigger_id == Trigger.id, TaskInstance.state == TaskState.DEFERRED,
            TaskInstance.dag_run_id.in_(only_runs),
        )  # fmt: skip
    return or_(Trigger.asset_id.is_not(None), deferred)


def claim(session: Session, triggerer_id: int, capacity: int, now: dt.datetime,
          timeout: float, only_runs: set[int] | None = None, *,
          take_over: bool = True) -> int:  # fmt: skip
    """Take triggers nobody runs, and with ``take_over`` those of triggerers that are
    gone, up to ``capacity`` in all; how many were taken."""
    held = session.scalar(select(func.count()).where(Trigger.triggerer_id == triggerer_id)) or 0
    room = capacity - held
    if room <= 0:
        return 0
    orphaned: Any = Trigger.triggerer_id.is_(None)
    if take_over:
        alive = alive_triggerers(session, now, timeout)
        orphaned = or_(orphaned, Trigger.triggerer_id.not_in([*alive, triggerer_id]))
    ids = session.scalars(
        select(Trigger.id).where(orphaned, _waited_for(only_runs)).order_by(Trigger.id)
        .limit(room).with_for_update(skip_locked=True)
    ).all()  # fmt: skip
    if ids:
        session.execute(
            update(Trigger).where(Trigger.id.in_(ids)).values(triggerer_id=triggerer_id)
        )
    return len(ids)


def assigned(session: Session, triggerer_id: int) -> list[Assigned]:
    """The triggers this triggerer holds, each with who waits for it."""
    rows = session.execute(
        select(Trigger, AssetModel.uri)
        .outerjoin(AssetModel, AssetModel.id == Trigger.asset_id)
        .where(Trigger.triggerer_id == triggerer_id)
        .order_by(Trigger.id)
    ).all()
    waiting = dict(session.execute(
        select(TaskInstance.trigger_id, func.min(TaskInstance.id)).where(
            TaskInstance.trigger_id.in_([trigger.id for trigger, _ in rows]),
            TaskInstance.state == TaskState.DEFERRED,
        ).group_by(TaskInstance.trigger_id)
    ).all())  # fmt: skip
    owners = {
        ti.id: f"task {ti.dag_id}.{ti.task_id} of run {run_id}"
        for ti, run_id in session.execute(
            select(TaskInstance, DagRun.run_id)
            .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
            .where(TaskInstance.id.in_(list(waiting.values())))
        )
    }
    found = []
    for trigger, uri in rows:
        if uri is not None:
            owner = f"asset {uri} (watcher {trigger.watcher_name})"
        else:
            owner = owners.get(waiting.get(trigger.id, -1), "no task any more")
        found.append(Assigned(trigger.id, trigger.classpath, trigger.kwargs, owner, uri))
    return found


def submit_event(session: Session, fired: TriggerFired, triggerer_id: int,
                 max_state_size: int) -> int:  # fmt: skip
    """What a trigger's event does: the task instances deferred on it are scheduled to
    resume with it (the trigger is then deleted), or, for an asset watcher that this
    triggerer still holds, the asset gets an event, and its state store the keys the
    event carries, in this transaction. How many task instances or asset events it made."""
    trigger = session.get(Trigger, fired.trigger_id, with_for_update=True)
    if trigger is None:
        return 0  # fired already (run again elsewhere), or nobody waits any more
    if trigger.asset_id is not None:
        return _watcher_event(session, trigger, fired, triggerer_id, max_state_size)
    waiting = session.scalars(
        select(TaskInstance).where(
            TaskInstance.trigger_id == trigger.id, TaskInstance.state == TaskState.DEFERRED
        ).with_for_update()
    ).all()  # fmt: skip
    event = xcom.decode(fired.payload)
    for ti in waiting:
        kwargs = xcom.decode(ti.next_kwargs or "{}")
        kwargs["event"] = event
        ti.next_kwargs = xcom.encode(kwargs, subject=f"the event for {ti.task_id}")
        ti.state, ti.trigger_id, ti.trigger_timeout = TaskState.SCHEDULED, None, None
    session.delete(trigger)
    return len(waiting)


def _watcher_event(session: Session, trigger: Trigger, fired: TriggerFired,
                   triggerer_id: int, max_state_size: int) -> int:  # fmt: skip
    if trigger.triggerer_id != triggerer_id:
        return 0  # taken over meanwhile: the triggerer that holds it reports it now
    asset = session.get(AssetModel, trigger.asset_id)
    if asset is None:
        return 0
    if session.scalar(select(AssetEvent.id).where(AssetEvent.trigger_event == fired.event_id)):
        return 0  # written already: its COMMIT's answer was lost
    data = msgspec.json.decode(fired.payload)  # JSON as written, tags and all: the extra
    extra = data if isinstance(data, dict) else {"payload": data}
    extra.setdefault("watcher", trigger.watcher_name)
    asset_events.record_event(session, asset, partition_key=fired.partition_key, extra=extra,
                              trigger_event=fired.event_id)  # fmt: skip
    for key, text in fired.state.items():
        if len(text.encode()) > max_state_size:
            log.warning("asset state too large to keep; the event is recorded without it",
                        asset=asset.uri, key=key, size=len(text.encode()))  # fmt: skip
            continue
        row = session.scalar(select(AssetStateValue).where(
            AssetStateValue.asset_id == asset.id, AssetStateValue.key == key
        ).with_for_update())  # fmt: skip
        if row is None:
            row = AssetStateValue(asset_id=asset.id, key=key)
            session.add(row)
        row.value, row.reference, row.updated_at = text, None, utcnow()
    return 1


def submit_failure(session: Session, bag: runs.DagBag, trigger_id: int, error: str) -> int:
    """A task's trigger failed (or ended without an event): the tries waiting on it fail
    (or are retried) with the reason. How many failed."""
    trigger = session.get(Trigger, trigger_id, with_for_update=True)
    if trigger is None or trigger.asset_id is not None:
        return 0  # a watcher's: the triggerer runs it again
    now = runs.utcnow()
    waiting = session.scalars(
        select(TaskInstance).where(
            TaskInstance.trigger_id == trigger_id, TaskInstance.state == TaskState.DEFERRED
        ).with_for_update()
    ).all()  # fmt: skip
    for ti in waiting:
        runs.fail(ti, now, f"its trigger failed: {error}", runs.retry_delay(session, bag, ti))
    session.delete(trigger)
    return len(waiting)


def clean_unused(session: Session) -> int:
    """Delete the triggers of tasks that no longer wait for them (cleared, failed from
    outside, timed out); how many."""
    result = session.execute(delete(Trigger).where(Trigger.asset_id.is_(None), ~_waited_for(None)))
    return int(getattr(result, "rowcount", 0) or 0)


def release(session: Session, triggerer_id: int) -> None:
    """A triggerer that stops lets go of its triggers: another takes them at once."""
    session.execute(
        update(Trigger).where(Trigger.triggerer_id == triggerer_id).values(triggerer_id=None)
    )
