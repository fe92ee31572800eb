"""Backfills in the scheduler's loop: a backfill is completed once all its runs finished.

Its runs are created, queued, by ``spawnflow dags backfill`` (see
:mod:`spawnflow.services.backfills`); the scheduler starts them within the backfill's
``max_active_runs`` (:func:`~spawnflow.processors.scheduler.runs.start_queued_runs`)
and runs them as any other run. What is left here is the end: the time the last of
them finished, which is what the command waits for and what tells a backfill that
can be resumed from one that is done.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from spawnflow.comms.states import DagRunState
from spawnflow.models.backfill import Backfill
from spawnflow.models.run import DagRun


def complete_backfills(session: Session, now: dt.datetime) -> list[tuple[int, str]]:
    """Mark completed each backfill none of whose runs is queued or running; their
    (id, Dag id)."""
    unfinished = exists().where(
        DagRun.backfill_id == Backfill.id, DagRun.state.in_(DagRunState.ACTIVE)
    )
    done = session.scalars(
        select(Backfill)
        .where(Backfill.completed_at.is_(None), ~unfinished)
        .with_for_update(skip_locked=True)
    ).all()
    for backfill in done:
        backfill.completed_at = now
    return [(backfill.id, backfill.dag_id) for backfill in done]
