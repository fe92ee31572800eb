"""``spawnflow dags backfill``: which logical dates to run, the backfill row and its runs,
and the scheduler that runs them in the command's own process, without click.

The dates come from the Dag's stored schedule, with the scheduler's own arithmetic
(:func:`spawnflow.processors.scheduler.timetable.between`). For each date, what
already ran decides (Airflow 3's reprocess behaviours): a date with no run gets a new
``backfill`` run; a date whose run is queued or running is never run twice; a date
whose run finished runs again, cleared, if the reprocess behaviour asks for it. The
backfill and all its runs are written in one transaction, so that a backfill stopped
at any point is either not there or whole, and running the command again resumes it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.states import DagRunState, ReprocessBehavior, RunType
from spawnflow.models.backfill import Backfill
from spawnflow.models.dag import DagModel, SerializedDagModel
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.processors.scheduler import runs, timetable
from spawnflow.sdk import serialize
from spawnflow.sdk.schedule import zone_from_name
from spawnflow.services.records import unknown_dag

#: What a backfill does about one logical date: a new run, its run again, nothing, or
#: (a backfill resumed) its run that has not finished yet.
CREATE, RERUN, SKIP, RESUME = "create", "rerun", "skip", "resume"


@dataclass(frozen=True)
class Request:
    """What the user asked for; dates as typed (a date without a zone is in the Dag's)."""

    dag_id: str
    start: str
    end: str
    reprocess: ReprocessBehavior = ReprocessBehavior.NONE
    #: None: the Dag's own max_active_runs.
    max_active_runs: int | None = None
    conf: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedDate:
    """One logical date of the range and what the backfill does about it."""

    logical_date: dt.datetime
    action: str
    #: The run it creates or runs again, or the one that made it skip the date.
    run_id: str | None
    #: Why a date is skipped or run again ("" for a new run).
    reason: str = ""


@dataclass
class Plan:
    """A backfill, written (``backfill_id``) or only planned (``dags backfill --dry-run``)."""

    dag_id: str
    from_date: dt.datetime
    to_date: dt.datetime
    reprocess: str
    max_active_runs: int
    paused: bool
    dates: list[PlannedDate]
    backfill_id: int | None = None
    #: The unfinished backfill of the same Dag and range that this one continues.
    resumed: bool = False

    def count(self, action: str) -> int:
        return sum(1 for date in self.dates if date.action == action)


@dataclass(frozen=True)
class Progress:
    """How far a backfill's runs are."""

    total: int
    succeeded: int
    failed: int
    running: int
    queued: int
    completed: bool

    @property
    def done(self) -> int:
        return self.succeeded + self.failed

    def describe(self) -> str:
        return (f"{self.done}/{self.total} runs done ({self.succeeded} succeeded, "
                f"{self.failed} failed), {self.running} running, {self.queued} queued")  # fmt: skip


def parse_moment(text: str, zone: dt.tzinfo, option: str) -> dt.datetime:
    """``text`` (an ISO 8601 date or time; without a zone, in ``zone``) as an aware time."""
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UserError(
            f"{option} {text!r} is not a date: give YYYY-MM-DD or an ISO 8601 time "
            "such as 2026-01-31T06:00:00+00:00"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)


def prepare(request: Request, *, dry_run: bool, now: dt.datetime | None = None) -> Plan:
    """Plan the backfill ``request`` asks for and, unless ``dry_run``, write it: the
    backfill row, a queued run for each new date, each date to run again cleared and
    queued. An unfinished backfill of the same Dag and range is continued instead (its
    plan is what it has left); one of another range is an error, as in Airflow.

    Raises:
        UnknownDag: no such Dag (with the closest id, or the file that does not import).
        UserError: the schedule has no dates of its own, the dates are malformed or
            reversed, or another backfill of the Dag is unfinished.
    """
    now = now or runs.utcnow()
    if request.max_active_runs is not None and request.max_active_runs < 1:
        raise UserError(f"--max-active-runs must be 1 or more, not {request.max_active_runs}")
    with orm.session_scope(write=not dry_run) as session:
        model = session.get(DagModel, request.dag_id, with_for_update=not dry_run)
        stored = session.get(SerializedDagModel, request.dag_id)
        if model is None or stored is None:
            raise unknown_dag(session, request.dag_id)
        document = serialize.decode(stored.data).dag
        zone = zone_from_name(document.timezone)
        first = parse_moment(request.start, zone, "--start-date")
        last = parse_moment(request.end, zone, "--end-date")
        if last < first:
            raise UserError(f"--end-date {request.end} is before --start-date {request.start}")
        if document.schedule.kind in ("manual", "assets", "once"):
            raise UserError(
                f"Dag {request.dag_id!r} has no dates of its own to backfill (its schedule is "
                f"{document.schedule.describe()}); trigger runs with `spawnflow dags trigger`"
            )
        first, last = first.astimezone(dt.UTC), last.astimezone(dt.UTC)
        unfinished = _unfinished(session, request.dag_id)
        if unfinished is not None:
            same = (runs.aware(unfinished.from_date), runs.aware(unfinished.to_date)) == (
                first,
                last,
            )
            if not same:
                raise UserError(
                    f"Dag {request.dag_id!r} has an unfinished backfill (id {unfinished.id}) "
                    f"from {_day(unfinished.from_date)} to {_day(unfinished.to_date)}; resume "
                    "it by running `spawnflow dags backfill` for that range again, or cancel "
                    f"it with `spawnflow backfills cancel {request.dag_id}`, before starting "
                    "another"
                )
            return _resumed(session, unfinished, bool(model.is_paused))
        intervals = timetable.between(document.schedule, document.start_date, document.end_date,
                                      first, last, zone)  # fmt: skip
        limit = request.max_active_runs or document.max_active_runs
        plan = Plan(request.dag_id, first, last, request.reprocess, limit,
                    bool(model.is_paused), _decide(session, request, intervals, now))  # fmt: skip
        if not intervals:
            raise UserError(
                f"Dag {request.dag_id!r} has no logical dates from {request.start} to "
                f"{request.end} (its schedule is {document.schedule.describe()}"
                + (f", from {_day(document.start_date)}" if document.start_date else "")
                + (f" to {_day(document.end_date)}" if document.end_date else "")
                + ")"
            )
        if dry_run:
            return plan
        stored_xcoms = _write(session, plan, request, document, intervals, now)
    if stored_xcoms:
        from spawnflow.bootstrap import settings as settings_module
        from spawnflow.services import xcoms

        xcoms.purge(settings_module.current(), stored_xcoms)
    return plan


def _day(moment: dt.datetime | None) -> str:
    aware = runs.aware(moment)
    if aware is None:
        return "-"
    if aware.time() == dt.time(0):
        return f"{aware:%Y-%m-%d}"
    return aware.isoformat()


def _unfinished(session, dag_id: str) -> Backfill | None:
    return session.scalar(
        select(Backfill)
        .where(Backfill.dag_id == dag_id, Backfill.completed_at.is_(None))
        .order_by(Backfill.id)
        .limit(1)
    )


def _resumed(session, backfill: Backfill, paused: bool) -> Plan:
    """The plan of an unfinished backfill: its runs, those that have not finished to go."""
    found = session.execute(
        select(DagRun.logical_date, DagRun.run_id, DagRun.state)
        .where(DagRun.backfill_id == backfill.id)
        .order_by(DagRun.logical_date)
    ).all()
    dates = [
        PlannedDate(runs.aware(moment), SKIP if state in DagRunState.FINISHED else RESUME, run_id,
                    f"already {state} in this backfill" if state in DagRunState.FINISHED else "")
        for moment, run_id, state in found
    ]  # fmt: skip
    return Plan(backfill.dag_id, runs.aware(backfill.from_date), runs.aware(backfill.to_date),
                backfill.reprocess_behavior, backfill.max_active_runs, paused, dates,
                backfill.id, resumed=True)  # fmt: skip


def _decide(session, request: Request, intervals: list[timetable.Interval],
            now: dt.datetime) -> list[PlannedDate]:  # fmt: skip
    """For each interval: a new run, the existing run again, or nothing (and why)."""
    existing: dict[dt.datetime, list[DagRun]] = {}
    if intervals:
        for run in session.scalars(
            select(DagRun)
            .where(DagRun.dag_id == request.dag_id,
                   DagRun.logical_date >= intervals[0].start - dt.timedelta(days=1),
                   DagRun.logical_date <= intervals[-1].start + dt.timedelta(days=1))
            .order_by(DagRun.id)
        ):  # fmt: skip
            existing.setdefault(runs.aware(run.logical_date), []).append(run)
    planned = []
    for interval in intervals:
        moment = interval.start
        found = existing.get(moment, [])
        active = next((r for r in found if r.state in DagRunState.ACTIVE), None)
        if interval.end > now:
            planned.append(PlannedDate(moment, SKIP, None, "its data interval has not ended yet"))
        elif active is not None:
            planned.append(PlannedDate(moment, SKIP, active.run_id, f"its run is {active.state}"))
        elif not found:
            planned.append(PlannedDate(moment, CREATE, f"backfill__{moment.isoformat()}"))
        else:
            newest = found[-1]
            again = request.reprocess == ReprocessBehavior.COMPLETED or (
                request.reprocess == ReprocessBehavior.FAILED and newest.state == DagRunState.FAILED
            )
            why = "its run succeeded" if newest.state == DagRunState.SUCCESS else "its run failed"
            if again:
                planned.append(PlannedDate(moment, RERUN, newest.run_id, why))
            else:
                planned.append(
                    PlannedDate(
                        moment,
                        SKIP,
                        newest.run_id,
                        f"{why} (--reprocess-behavior {request.reprocess})",
                    )
                )
    return planned


def _write(session, plan: Plan, request: Request, document: serialize.SerializedDag,
           intervals: list[timetable.Interval], now: dt.datetime) -> list:  # fmt: skip
    """Write the backfill and its runs; the XCom values of cleared runs to purge."""
    from spawnflow.services.runs import clear_task

    conf = json.dumps(request.conf)
    backfill = Backfill(
        dag_id=plan.dag_id, from_date=plan.from_date, to_date=plan.to_date,
        reprocess_behavior=str(plan.reprocess), max_active_runs=plan.max_active_runs,
        conf=conf, created_at=now,
    )  # fmt: skip
    session.add(backfill)
    session.flush()
    plan.backfill_id = backfill.id
    by_start = {interval.start: interval for interval in intervals}
    stored: list = []
    for date in plan.dates:
        if date.action == CREATE:
            interval = by_start[date.logical_date]
            session.add(DagRun(
                dag_id=plan.dag_id, run_id=date.run_id, run_type=RunType.BACKFILL,
                state=DagRunState.QUEUED, logical_date=interval.start,
                data_interval_start=interval.start, data_interval_end=interval.end, conf=conf,
                backfill_id=backfill.id,
            ))  # fmt: skip
        elif date.action == RERUN:
            run = session.scalar(
                select(DagRun).where(DagRun.dag_id == plan.dag_id, DagRun.run_id == date.run_id)
                .with_for_update()
            )  # fmt: skip
            assert run is not None  # read in this transaction, and runs are never deleted
            by_task: dict[str, list[TaskInstance]] = {}
            for ti in session.scalars(
                select(TaskInstance).where(TaskInstance.dag_run_id == run.id)
                .order_by(TaskInstance.map_index).with_for_update()
            ):  # fmt: skip
                by_task.setdefault(ti.task_id, []).append(ti)
            for task_id, rows in by_task.items():
                if task_id in document.task_ids:  # a task gone from the Dag stays as it was
                    # A mapped task expands again, as `tasks clear` has it.
                    stored += clear_task(session, run, rows, document.task(task_id).retries)
            # Its run type stays: a scheduled run is still the schedule's (the scheduler
            # goes on from its newest scheduled run).
            run.state, run.start_date, run.end_date = DagRunState.QUEUED, None, None
            run.backfill_id = backfill.id
    if not plan.count(CREATE) and not plan.count(RERUN):
        backfill.completed_at = now  # nothing to run: done as soon as it is asked
    return stored


def progress(backfill_id: int) -> Progress:
    """How many of the backfill's runs are in each state."""
    with orm.session_scope(write=False) as session:
        counts = dict(session.execute(
            select(DagRun.state, func.count()).where(DagRun.backfill_id == backfill_id)
            .group_by(DagRun.state)
        ).all())  # fmt: skip
        completed = session.scalar(select(Backfill.completed_at).where(Backfill.id == backfill_id))
    return Progress(sum(counts.values()), counts.get(DagRunState.SUCCESS, 0),
                    counts.get(DagRunState.FAILED, 0), counts.get(DagRunState.RUNNING, 0),
                    counts.get(DagRunState.QUEUED, 0), completed is not None)  # fmt: skip


def list_backfills(dag_id: str | None = None) -> list[dict[str, Any]]:
    """The backfills (of ``dag_id``, if given), newest first, with their runs' progress.

    Raises:
        UnknownDag: no Dag ``dag_id``.
    """
    with orm.session_scope(write=False) as session:
        query = select(Backfill).order_by(Backfill.id.desc())
        if dag_id is not None:
            if session.get(DagModel, dag_id) is None:
                raise unknown_dag(session, dag_id)
            query = query.where(Backfill.dag_id == dag_id)
        found: list[dict[str, Any]] = [
            {"id": b.id, "dag_id": b.dag_id, "from_date": runs.aware(b.from_date),
             "to_date": runs.aware(b.to_date), "reprocess_behavior": b.reprocess_behavior,
             "max_active_runs": b.max_active_runs, "created_at": runs.aware(b.created_at),
             "completed_at": runs.aware(b.completed_at)}
            for b in session.scalars(query)
        ]  # fmt: skip
    for record in found:
        done = progress(record["id"])
        record.update(runs=done.total, succeeded=done.succeeded, failed=done.failed,
                      running=done.running, queued=done.queued)  # fmt: skip
    return found


@dataclass(frozen=True)
class Cancelled:
    """What cancelling a backfill did."""

    backfill_id: int
    from_date: dt.datetime
    to_date: dt.datetime
    #: Its runs that had not started: failed now.
    failed_runs: int
    #: Its runs that were running: they finish.
    running_runs: int


def cancel(dag_id: str, now: dt.datetime | None = None) -> Cancelled:
    """Cancel Dag ``dag_id``'s unfinished backfill, as Airflow 3 cancels one: its runs
    that have not started (queued) end failed, those running finish, and the backfill is
    completed now, so that another range may be backfilled.

    Raises:
        UnknownDag: no such Dag.
        UserError: the Dag has no unfinished backfill.
    """
    now = now or runs.utcnow()
    with orm.session_scope() as session:
        # The Dag's row first, as ``prepare`` locks it: a backfill being written waits.
        if session.get(DagModel, dag_id, with_for_update=True) is None:
            raise unknown_dag(session, dag_id)
        backfill = _unfinished(session, dag_id)
        if backfill is None:
            raise UserError(f"Dag {dag_id!r} has no unfinished backfill to cancel")
        queued = session.scalars(
            select(DagRun)
            .where(DagRun.backfill_id == backfill.id, DagRun.state == DagRunState.QUEUED)
            .with_for_update()
        ).all()  # fmt: skip
        for run in queued:
            run.state, run.end_date = DagRunState.FAILED, now
        running = session.scalar(select(func.count()).where(
            DagRun.backfill_id == backfill.id, DagRun.state == DagRunState.RUNNING
        ))  # fmt: skip
        backfill.completed_at = now
        return Cancelled(backfill.id, runs.aware(backfill.from_date),
                         runs.aware(backfill.to_date), len(queued), running or 0)  # fmt: skip


def run_backfill(settings: Settings, backfill_id: int,
                 on_progress: Callable[[Progress], None]) -> Progress:  # fmt: skip
    """Run the backfill's runs to their end with the scheduler's own code and an executor
    in this process (as ``dags test`` does), limited to those runs; ``on_progress`` after
    each turn of the loop. A stop request (Ctrl-C) ends it at once: the runs stay queued
    or running, and the tasks it cut short are queued again, for a resume."""
    from spawnflow.bootstrap import launcher
    from spawnflow.bootstrap.child import stop_many
    from spawnflow.processors.scheduler.job import Scheduler
    from spawnflow.services.testing import TRIGGERER_TARGET

    with orm.session_scope(write=False) as session:
        ids = set(session.scalars(select(DagRun.id).where(DagRun.backfill_id == backfill_id)))
    latest = [progress(backfill_id)]
    triggerer: list[launcher.Child] = []

    def report(summary) -> None:
        latest[0] = progress(backfill_id)
        on_progress(latest[0])
        if not triggerer and summary.deferred_tasks:
            # A task deferred: a triggerer for the backfill's triggers, as `dags test`
            # starts one, until the backfill ends.
            spec = launcher.ChildSpec("triggerer", TRIGGERER_TARGET, {"only_runs": sorted(ids)},
                                      settings=settings, warm_stop_group=False)  # fmt: skip
            triggerer.append(launcher.launch(spec))

    on_progress(latest[0])
    if not latest[0].completed or latest[0].running:
        # The configured executor; the Dag's other runs are left to the scheduler.
        scheduler = Scheduler(settings, only_runs=ids, on_loop=report)
        try:
            # Completed with runs still running: cancelled (`backfills cancel`); those finish.
            scheduler.run(until=lambda: latest[0].completed and not latest[0].running)
        finally:
            stop_many(triggerer)
    return latest[0]
