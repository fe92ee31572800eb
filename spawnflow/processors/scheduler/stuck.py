"""Task instances stuck in queued: their workload left the executor, and no worker
started the try within ``[scheduler] task_queued_timeout`` (Airflow's setting of that
name).

A message can be lost on its way: a broker restarted without persistence, a worker
that took it and died before it started the try. Such a task instance is queued
again, its try not counted (a try counts when it starts), up to
``[scheduler] num_stuck_in_queued_retries`` times, then failed with a reason that
says so. The lost message may still turn up: a worker starts a try only through a
conditional write (the row queued, for that try), so of the old message and the new
one at most one starts it.

How many times a task instance was queued again is kept in its ``reason``, which the
start of a try clears: so the count is per try, and survives a scheduler restart.
"""

from __future__ import annotations

import datetime as dt
import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from spawnflow.comms.states import TaskState
from spawnflow.models.run import TaskInstance
from spawnflow.models.triggers import end_deferral

_AGAIN = re.compile(r"; queued again \((\d+) of \d+\)$")


def requeue_or_fail(
    session: Session, job_id: int, now: dt.datetime, timeout: float, retries: int,
    sent: dict[int, int], held: set[int],
) -> tuple[list[tuple[TaskInstance, int]], list[tuple[TaskInstance, int]]]:  # fmt: skip
    """Queue again, or fail, this scheduler's task instances queued before ``now -
    timeout`` whose workload its executor sent (``sent``) or does not hold
    (``held``); what waits inside the executor for a worker of its own is left to it.

    Returns (queued again, failed), each task instance with the try number its
    workload carried: the caller tells the executor to forget those tries once this
    transaction committed."""
    late = session.scalars(
        select(TaskInstance).where(
            TaskInstance.state == TaskState.QUEUED,
            TaskInstance.scheduler_job_id == job_id,
            TaskInstance.queued_at < now - dt.timedelta(seconds=timeout),
        ).with_for_update(skip_locked=True)
    ).all()  # fmt: skip
    again: list[tuple[TaskInstance, int]] = []
    failed: list[tuple[TaskInstance, int]] = []
    for ti in late:
        if ti.id in held and ti.id not in sent:
            continue
        # As queueing numbers it: a resumed deferral keeps its try, others start the next.
        try_number = ti.try_number if ti.next_method is not None else ti.try_number + 1
        done = queued_again(ti.reason)
        stuck = f"queued for more than {timeout:g} s without a worker starting it"
        if done < retries:
            ti.state, ti.scheduler_job_id = TaskState.SCHEDULED, None
            ti.reason = f"{stuck}; queued again ({done + 1} of {retries})"
            again.append((ti, try_number))
        else:
            ti.state, ti.end_date = TaskState.FAILED, now
            ti.reason = (
                f"{stuck}, {done + 1} time(s) ([scheduler] task_queued_timeout, "
                f"num_stuck_in_queued_retries = {retries}): its message was lost, or "
                "every worker that took it died first; failed"
            )
            end_deferral(ti)
            failed.append((ti, try_number))
    return again, failed


def queued_again(reason: str | None) -> int:
    """How many times the task instance's current try was queued again for staying
    queued too long (0 when its reason says nothing of it)."""
    found = _AGAIN.search(reason or "")
    return int(found.group(1)) if found else 0
