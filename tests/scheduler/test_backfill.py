"""Backfills without a process: which dates, what each date's existing run decides, the
backfill row and its runs, resuming, and the scheduler's limits and completion, on
SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import datetime as dt
import json
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import delete, func, select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError
from spawnflow.comms.states import ReprocessBehavior
from spawnflow.models.backfill import Backfill
from spawnflow.models.run import DagRun, TaskInstance, XCom
from spawnflow.processors.scheduler import backfills as scheduler_backfills
from spawnflow.processors.scheduler import runs
from spawnflow.processors.scheduler.timetable import between
from spawnflow.sdk.schedule import parse
from spawnflow.services import backfills
from spawnflow.services.backfills import CREATE, RERUN, RESUME, SKIP, Request
from spawnflow.services.records import UnknownDag
from tests.commands import stored_dags

UTC = dt.UTC
JAN = [dt.datetime(2026, 1, day, tzinfo=UTC) for day in range(1, 32)]
#: "Now" for every plan here: long after the dates backfilled.
NOW = dt.datetime(2026, 3, 1, tzinfo=UTC)


def day(n: int) -> dt.datetime:
    return JAN[n - 1]


# -- dates (no database) ------------------------------------------------------------------


def test_the_dates_are_the_schedule_s_logical_dates_in_the_range_both_ends_included():
    found = between(parse("@daily"), day(1), None, day(3), day(12))
    assert [i.start for i in found] == [day(n) for n in range(3, 13)]
    assert found[0].end == day(4)


def test_a_range_between_two_ticks_starts_at_the_next_tick_and_ends_at_the_last():
    found = between(parse("0 6 * * *"), day(1), None, day(3), day(5) + dt.timedelta(hours=12))
    assert [i.start.hour for i in found] == [6, 6, 6]
    assert [i.start.day for i in found] == [3, 4, 5]


def test_an_interval_schedule_keeps_to_the_dag_s_start_date():
    start = day(1) + dt.timedelta(hours=3)
    found = between(parse(dt.timedelta(hours=6)), start, None, day(2), day(3))
    assert [i.start for i in found] == [day(2) + dt.timedelta(hours=h) for h in (3, 9, 15, 21)]


def test_the_dag_s_start_and_end_dates_bound_the_range():
    found = between(parse("@daily"), day(5), day(8), day(1), day(20))
    assert [i.start for i in found] == [day(n) for n in range(5, 9)]


def test_cron_dates_are_the_dag_s_zone_s():
    paris = ZoneInfo("Europe/Paris")
    start = dt.datetime(2026, 1, 1, tzinfo=paris)
    first = dt.datetime(2026, 1, 2, tzinfo=paris)
    found = between(parse("@daily"), start, None, first, first + dt.timedelta(days=1), paris)
    assert [i.start for i in found] == [dt.datetime(2026, 1, 1, 23, tzinfo=UTC),
                                        dt.datetime(2026, 1, 2, 23, tzinfo=UTC)]  # fmt: skip


@pytest.mark.parametrize("schedule", [None, "@once"])
def test_a_schedule_without_dates_of_its_own_has_none_to_backfill(schedule):
    assert between(parse(schedule), day(1), None, day(1), day(9)) == []


# -- plans and rows -------------------------------------------------------------------------


@pytest.fixture
def daily(migrated_database):
    """A daily Dag of two tasks from 1 January 2026, paused, on each backend."""
    with orm.session_scope() as session:
        stored_dags.store(session, "daily", ["a", "b"], paused=True, schedule="@daily",
                          start_date=day(1), max_active_runs=3)  # fmt: skip
    return migrated_database


def request(start="2026-01-01", end="2026-01-10", **kwargs) -> Request:
    return Request("daily", start, end, **kwargs)


def add_run(logical_date: dt.datetime, state: str, run_type: str = "scheduled") -> int:
    """A run of ``daily`` at ``logical_date`` with its two task instances in ``state``
    (or none yet when it is queued), and an XCom."""
    with orm.session_scope() as session:
        run = DagRun(dag_id="daily", run_id=f"{run_type}__{logical_date.isoformat()}",
                     run_type=run_type, state=state, logical_date=logical_date,
                     data_interval_start=logical_date, conf="{}")  # fmt: skip
        session.add(run)
        session.flush()
        if state != "queued":
            ti_state = {"running": "running", "success": "success", "failed": "failed"}[state]
            for task_id in ("a", "b"):
                ti = TaskInstance(dag_run_id=run.id, dag_id="daily", task_id=task_id,
                                  state=ti_state, try_number=1, max_tries=0)  # fmt: skip
                session.add(ti)
                session.flush()
                session.add(XCom(task_instance_id=ti.id, key="return_value", value="1"))
        return run.id


def backfill_runs(backfill_id: int) -> dict[dt.datetime, tuple[str, str, str]]:
    with orm.session_scope(write=False) as session:
        rows = session.execute(
            select(DagRun.logical_date, DagRun.run_id, DagRun.run_type, DagRun.state)
            .where(DagRun.backfill_id == backfill_id)
        ).all()  # fmt: skip
    return {
        runs.aware(moment): (run_id, run_type, state) for moment, run_id, run_type, state in rows
    }


def count(model) -> int:
    with orm.session_scope(write=False) as session:
        return session.scalar(select(func.count()).select_from(model))


def test_a_backfill_writes_itself_and_a_queued_run_per_date(daily):
    plan = backfills.prepare(request(conf={"who": "me"}, max_active_runs=2), dry_run=False,
                             now=NOW)  # fmt: skip
    assert plan.backfill_id is not None
    assert plan.paused
    assert [d.action for d in plan.dates] == [CREATE] * 10
    found = backfill_runs(plan.backfill_id)
    assert sorted(found) == [day(n) for n in range(1, 11)]
    assert found[day(1)] == ("backfill__2026-01-01T00:00:00+00:00", "backfill", "queued")
    with orm.session_scope(write=False) as session:
        backfill = session.get(Backfill, plan.backfill_id)
        assert (backfill.dag_id, backfill.max_active_runs, backfill.reprocess_behavior) == (
            "daily",
            2,
            "none",
        )
        assert json.loads(backfill.conf) == {"who": "me"}
        assert backfill.completed_at is None
        run = session.scalar(select(DagRun).where(DagRun.backfill_id == backfill.id).limit(1))
        assert json.loads(run.conf) == {"who": "me"}
        assert runs.aware(run.data_interval_end) - runs.aware(run.data_interval_start) == (
            dt.timedelta(days=1)
        )


def test_the_dag_s_max_active_runs_is_the_default(daily):
    plan = backfills.prepare(request(), dry_run=True, now=NOW)
    assert plan.max_active_runs == 3


def test_a_dry_run_writes_nothing(daily):
    plan = backfills.prepare(request(), dry_run=True, now=NOW)
    assert plan.backfill_id is None
    assert len(plan.dates) == 10
    assert (count(Backfill), count(DagRun)) == (0, 0)


def test_dates_whose_interval_has_not_ended_are_skipped(daily):
    now = day(5) + dt.timedelta(hours=12)
    plan = backfills.prepare(request(), dry_run=True, now=now)
    actions = {d.logical_date: (d.action, d.reason) for d in plan.dates}
    assert actions[day(4)] == (CREATE, "")
    assert actions[day(5)] == (SKIP, "its data interval has not ended yet")
    assert actions[day(10)][0] == SKIP


#: What each reprocess behaviour does to a date whose run succeeded, failed, or is queued
#: or running (the last two: never run twice).
EXPECTED = {
    "none": {"success": SKIP, "failed": SKIP, "queued": SKIP, "running": SKIP},
    "failed": {"success": SKIP, "failed": RERUN, "queued": SKIP, "running": SKIP},
    "completed": {"success": RERUN, "failed": RERUN, "queued": SKIP, "running": SKIP},
}


@pytest.mark.parametrize("behavior", ["none", "failed", "completed"])
def test_what_a_date_s_existing_run_decides(daily, behavior):
    states = {day(2): "success", day(3): "failed", day(4): "queued", day(5): "running"}
    for moment, state in states.items():
        add_run(moment, state)
    plan = backfills.prepare(request(reprocess=ReprocessBehavior(behavior)), dry_run=False,
                             now=NOW)  # fmt: skip
    actions = {d.logical_date: d.action for d in plan.dates}
    assert actions[day(1)] == CREATE
    assert actions[day(6)] == CREATE
    assert {states[m]: actions[m] for m in states} == EXPECTED[behavior]
    reasons = {d.logical_date: d.reason for d in plan.dates}
    assert reasons[day(4)] == "its run is queued"
    assert reasons[day(5)] == "its run is running"
    # Every date has exactly one run, whatever the behaviour.
    with orm.session_scope(write=False) as session:
        per_date = session.execute(
            select(DagRun.logical_date, func.count()).group_by(DagRun.logical_date)
        ).all()  # fmt: skip
    assert sorted(n for _, n in per_date) == [1] * 10
    attached = backfill_runs(plan.backfill_id)
    assert len(attached) == 10 - list(actions.values()).count(SKIP)


def test_a_run_again_is_cleared_queued_and_attached_keeping_its_type(daily):
    run_id = add_run(day(3), "failed")
    plan = backfills.prepare(request(reprocess=ReprocessBehavior.FAILED), dry_run=False,
                             now=NOW)  # fmt: skip
    with orm.session_scope(write=False) as session:
        run = session.get(DagRun, run_id)
        assert (run.state, run.run_type, run.backfill_id) == ("queued", "scheduled",
                                                              plan.backfill_id)  # fmt: skip
        assert run.start_date is None
        assert run.end_date is None
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_run_id == run_id)).all()
        assert [(ti.state, ti.max_tries) for ti in tis] == [("none", 1), ("none", 1)]
        assert session.scalar(select(func.count()).select_from(XCom)) == 0


def test_a_run_again_expands_its_mapped_task_again(daily):
    """As ``tasks clear`` does (services.runs.clear_task): instance 0 goes back to the
    task's one unexpanded row and the others are removed, for the scheduler to expand
    the task over its upstream's new output."""
    run_id = add_run(day(3), "failed")
    with orm.session_scope() as session:
        session.execute(delete(TaskInstance).where(TaskInstance.task_id == "b"))
        for index in range(3):
            session.add(TaskInstance(dag_run_id=run_id, dag_id="daily", task_id="b",
                                     map_index=index, state="failed", try_number=1,
                                     max_tries=0))  # fmt: skip
    backfills.prepare(request(reprocess=ReprocessBehavior.FAILED), dry_run=False, now=NOW)
    with orm.session_scope(write=False) as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state)
            .where(TaskInstance.dag_run_id == run_id)
            .order_by(TaskInstance.task_id, TaskInstance.map_index)
        ).all()  # fmt: skip
    assert [tuple(row) for row in rows] == [
        ("a", -1, "none"),
        ("b", -1, "none"),
        ("b", 1, "removed"),
        ("b", 2, "removed"),
    ]


def test_running_the_same_backfill_again_resumes_it(daily):
    first = backfills.prepare(request(), dry_run=False, now=NOW)
    with orm.session_scope() as session:  # three of its runs ended before it stopped
        for run in session.scalars(select(DagRun).where(DagRun.logical_date <= day(3))):
            run.state = "success"
    again = backfills.prepare(request(), dry_run=False, now=NOW)
    assert again.resumed
    assert again.backfill_id == first.backfill_id
    assert [d.action for d in again.dates] == [SKIP] * 3 + [RESUME] * 7
    assert (count(Backfill), count(DagRun)) == (1, 10)


def test_another_range_while_one_is_unfinished_is_refused(daily):
    first = backfills.prepare(request(), dry_run=False, now=NOW)
    with pytest.raises(UserError) as caught:
        backfills.prepare(request(end="2026-01-11"), dry_run=False, now=NOW)
    assert str(caught.value) == (
        f"Dag 'daily' has an unfinished backfill (id {first.backfill_id}) from 2026-01-01 to "
        "2026-01-10; resume it by running `spawnflow dags backfill` for that range again, "
        "or cancel it with `spawnflow backfills cancel daily`, before starting another"
    )


def test_a_backfill_with_nothing_to_run_is_completed_at_once(daily):
    for n in range(1, 11):
        add_run(day(n), "success")
    plan = backfills.prepare(request(), dry_run=False, now=NOW)
    assert plan.count(SKIP) == 10
    assert backfills.progress(plan.backfill_id).completed
    # So a second one may follow.
    backfills.prepare(request(end="2026-01-11"), dry_run=False, now=NOW)


def test_a_date_without_a_zone_is_in_the_dag_s(migrated_database):
    paris = ZoneInfo("Europe/Paris")
    with orm.session_scope() as session:
        stored_dags.store(session, "daily", ["a"], schedule="@daily",
                          start_date=dt.datetime(2026, 1, 1, tzinfo=paris))  # fmt: skip
    plan = backfills.prepare(request("2026-01-02", "2026-01-03"), dry_run=True, now=NOW)
    evenings = [dt.datetime(2026, 1, n, 23, tzinfo=UTC) for n in (1, 2)]  # midnight in Paris
    assert [d.logical_date for d in plan.dates] == evenings


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dag_id": "dialy"}, "there is no Dag 'dialy'; did you mean 'daily'?"),
        ({"start": "2026-01-05", "end": "2026-01-01"},
         "--end-date 2026-01-01 is before --start-date 2026-01-05"),
        ({"start": "2026-1-5"}, "--start-date '2026-1-5' is not a date"),
        ({"max_active_runs": 0}, "--max-active-runs must be 1 or more, not 0"),
        ({"start": "2025-01-01", "end": "2025-02-01"},
         "Dag 'daily' has no logical dates from 2025-01-01 to 2025-02-01 (its schedule is"),
    ],
)  # fmt: skip
def test_bad_requests_are_one_sentence(daily, kwargs, message):
    asked = {"dag_id": "daily", "start": "2026-01-01", "end": "2026-01-10", **kwargs}
    with pytest.raises(UserError) as caught:
        backfills.prepare(Request(**asked), dry_run=False, now=NOW)
    assert str(caught.value).startswith(message), str(caught.value)
    if kwargs.get("dag_id"):
        assert isinstance(caught.value, UnknownDag)
    assert count(Backfill) == 0


def test_a_dag_without_a_schedule_cannot_be_backfilled(migrated_database):
    with orm.session_scope() as session:
        stored_dags.store(session, "daily", ["a"], start_date=day(1))
    with pytest.raises(UserError, match="has no dates of its own to backfill"):
        backfills.prepare(request(), dry_run=False, now=NOW)


# -- the scheduler's side ---------------------------------------------------------------------


def start_queued() -> None:
    with orm.session_scope() as session:
        runs.start_queued_runs(session, runs.DagBag(), NOW, None)


def states_by_type() -> dict[tuple[str, str], int]:
    with orm.session_scope(write=False) as session:
        rows = session.execute(
            select(DagRun.run_type, DagRun.state, func.count())
            .group_by(DagRun.run_type, DagRun.state)
        ).all()  # fmt: skip
    return {(run_type, state): n for run_type, state, n in rows}


def test_a_backfill_s_runs_start_within_its_own_limit_apart_from_the_dag_s(daily):
    # The Dag's max_active_runs is 3: three of its own runs running.
    for n in (20, 21, 22):
        add_run(day(n), "running")
    backfills.prepare(request(max_active_runs=2), dry_run=False, now=NOW)
    start_queued()
    assert states_by_type() == {("scheduled", "running"): 3, ("backfill", "running"): 2,
                                ("backfill", "queued"): 8}  # fmt: skip
    start_queued()  # no room until one ends
    assert states_by_type()[("backfill", "running")] == 2
    with orm.session_scope() as session:
        ended = session.scalar(
            select(DagRun).where(DagRun.run_type == "backfill", DagRun.state == "running")
            .order_by(DagRun.logical_date).limit(1)
        )  # fmt: skip
        ended.state = "success"
        assert runs.aware(ended.logical_date) == day(1)  # in date order
    start_queued()
    assert states_by_type()[("backfill", "running")] == 2
    assert states_by_type()[("backfill", "queued")] == 7


def test_the_schedule_is_not_held_up_by_a_backfill_and_skips_its_dates(migrated_database):
    with orm.session_scope() as session:
        stored_dags.store(session, "daily", ["a"], schedule="@daily", start_date=day(1),
                          catchup=True, max_active_runs=1)  # fmt: skip
    backfills.prepare(request("2026-01-01", "2026-01-03"), dry_run=False, now=NOW)
    created = []
    for _ in range(2):
        with orm.session_scope() as session:
            runs.create_due_runs(session, runs.DagBag(), NOW)
        with orm.session_scope() as session:  # let the next one be due
            for run in session.scalars(select(DagRun).where(DagRun.run_type == "scheduled")):
                if run.state == "queued":
                    created.append(runs.aware(run.logical_date))
                    run.state = "success"
    # Three queued backfill runs do not count against max_active_runs=1, and the
    # schedule goes on after the dates the backfill has.
    assert created == [day(4), day(5)]


def test_a_backfill_completes_when_its_last_run_ends(daily):
    plan = backfills.prepare(request(end="2026-01-02"), dry_run=False, now=NOW)
    with orm.session_scope() as session:
        assert scheduler_backfills.complete_backfills(session, NOW) == []
        for run in session.scalars(select(DagRun)):
            run.state = "success" if run.logical_date == day(1) else "running"
    with orm.session_scope() as session:
        assert scheduler_backfills.complete_backfills(session, NOW) == []
        for run in session.scalars(select(DagRun)):
            run.state = "failed"
    with orm.session_scope() as session:
        assert scheduler_backfills.complete_backfills(session, NOW) == [(plan.backfill_id,
                                                                         "daily")]  # fmt: skip
    done = backfills.progress(plan.backfill_id)
    assert (done.total, done.succeeded, done.failed, done.completed) == (2, 0, 2, True)
