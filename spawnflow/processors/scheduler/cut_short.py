"""Task instances a stop cut short: queued again at once, their try not counted.

A cold stop (a second Ctrl-C, or a warm stop whose grace period ran out) kills the
workers and their tasks before the supervisors can write how each try ended. Left
alone, those rows would stay ``running`` until ``[scheduler] task_heartbeat_timeout``
and then fail, charging a try the task never got to finish. Whoever did the killing
records it instead, with the reason on each row: the scheduler for its own workers,
``standalone`` for a scheduler it had to kill with its whole tree.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.orm import Session

from spawnflow.bootstrap import logs
from spawnflow.comms.states import JobState, TaskState
from spawnflow.models.job import Job
from spawnflow.models.run import TaskInstance
from spawnflow.models.triggers import end_deferral
from spawnflow.processors.scheduler.runs import utcnow

log = logs.get_logger("spawnflow.scheduler")


def release(session: Session, job_id: int, why: str, ti_ids: Collection[int] | None = None) -> int:
    """Queue again the task instances scheduler job ``job_id`` had queued or running
    (only ``ti_ids`` if given), once the processes that ran them are gone, and record
    that the job stopped. A try that had started is not counted. Returns how many."""
    query = select(TaskInstance).where(
        TaskInstance.scheduler_job_id == job_id,
        TaskInstance.state.in_((TaskState.QUEUED, TaskState.RUNNING)),
    )
    if ti_ids is not None:
        query = query.where(TaskInstance.id.in_(ti_ids))
    now = utcnow()
    released = session.scalars(query.with_for_update()).all()
    for ti in released:
        if ti.state == TaskState.RUNNING:
            ti.try_number -= 1  # it never got to finish: this try does not count
            ti.end_date, ti.task_pid, ti.worker_pid = now, None, None
            end_deferral(ti)  # a resumed try too: it runs again from its start
        ti.state, ti.scheduler_job_id, ti.reason = TaskState.SCHEDULED, None, why
    job = session.get(Job, job_id)
    if job is not None and job.state == JobState.RUNNING:
        job.state, job.end_date = JobState.STOPPED, now
    if released:
        log.warning("queued again the task instances a stop cut short", count=len(released),
                    reason=why)  # fmt: skip
    return len(released)


def job_of(session: Session, hostname: str, pid: int) -> int | None:
    """The running scheduler job of process ``pid`` on ``hostname``, if it registered."""
    return session.scalars(
        select(Job.id).where(
            Job.job_type == "scheduler", Job.state == JobState.RUNNING,
            Job.hostname == hostname, Job.pid == pid,
        ).order_by(Job.id.desc())
    ).first()  # fmt: skip
