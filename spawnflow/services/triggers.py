"""What ``spawnflow triggers list`` shows: each trigger, who runs it, who waits for it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.comms.states import TaskState
from spawnflow.models.assets import AssetModel
from spawnflow.models.job import Job
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.models.triggers import Trigger
from spawnflow.processors.scheduler.runs import aware


@dataclass(frozen=True)
class TriggerInfo:
    trigger_id: int
    classpath: str
    #: ``host:pid`` of the triggerer that holds it, or None.
    triggerer: str | None
    owner: str
    since: dt.datetime


def list_triggers() -> list[TriggerInfo]:
    """Every trigger, oldest first."""
    with orm.session_scope(write=False) as session:
        rows = session.execute(
            select(Trigger, Job, AssetModel.uri)
            .outerjoin(Job, Job.id == Trigger.triggerer_id)
            .outerjoin(AssetModel, AssetModel.id == Trigger.asset_id)
            .order_by(Trigger.id)
        ).all()
        waiting = {
            ti.trigger_id: f"{ti.dag_id}.{ti.task_id} (run {run_id})"
            for ti, run_id in session.execute(
                select(TaskInstance, DagRun.run_id)
                .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
                .where(
                    TaskInstance.state == TaskState.DEFERRED, TaskInstance.trigger_id.is_not(None)
                )
            )
        }
        found = []
        for trigger, job, uri in rows:
            if uri is not None:
                owner = f"asset {uri} (watcher {trigger.watcher_name})"
            else:
                owner = waiting.get(trigger.id, "nobody (cleaned up soon)")
            holder = f"{job.hostname}:{job.pid}" if job is not None else None
            found.append(TriggerInfo(trigger.id, trigger.classpath, holder, owner,
                                     aware(trigger.created_at)))  # fmt: skip
        return found
