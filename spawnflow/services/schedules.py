"""When a Dag's schedule creates its next runs (``dags next-execution``), without click.

The scheduler's own arithmetic (:mod:`spawnflow.processors.scheduler.timetable`), from
the Dag's stored schedule and its newest scheduled run, so the answer is what the
scheduler will do, not a second opinion.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from spawnflow.bootstrap import orm
from spawnflow.processors.scheduler import runs, timetable
from spawnflow.sdk.schedule import Schedule, zone_from_name
from spawnflow.services.dags import get_dag


@dataclass(frozen=True)
class NextRuns:
    """The runs a Dag's schedule will create next, and what the user should know."""

    schedule: Schedule
    paused: bool
    #: Each run's data interval; its logical date is the start, it is created after the end.
    intervals: list[timetable.Interval]


def next_runs(dag_id: str, count: int, now: dt.datetime | None = None) -> NextRuns:
    """The next ``count`` runs that the schedule of ``dag_id`` creates, if the scheduler
    runs on time (fewer where the schedule ends, none for a manual or asset schedule);
    UnknownDag if there is no such Dag."""
    model, document = get_dag(dag_id)
    with orm.session_scope(write=False) as session:
        last = runs.last_scheduled(session, dag_id)
    intervals = timetable.upcoming(
        document.schedule, document.start_date, document.end_date, document.catchup, last,
        now or runs.utcnow(), zone_from_name(document.timezone), count,
    )  # fmt: skip
    return NextRuns(document.schedule, bool(model.is_paused), intervals)
