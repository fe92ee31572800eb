"""Partition-driven runs: an hourly asset rolled up into daily runs, on SQLite,
PostgreSQL and MariaDB, under each start method."""

from __future__ import annotations

import pytest

from spawnflow.bootstrap import orm
from spawnflow.models.assets import AssetWakeRequest, PendingAssetRun
from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
from spawnflow.processors.scheduler import asset_runs, runs
from spawnflow.processors.scheduler.job import Scheduler
from spawnflow.services import assets as service
from tests.assets import count, parsed_project, partition_runs
from tests.scheduler import harness

pytestmark = pytest.mark.process

HOURLY = "s3://logs/hourly"
DAGS = """
from pathlib import Path
from spawnflow import Asset, Dag, HourToDay, get_current_context, task

MARKS = Path({marks!r})
HOURLY = Asset({hourly!r})

with Dag("daily_rollup", schedule=HOURLY, partition_mappers={{HOURLY: HourToDay()}}):
    @task
    def roll_up():
        (MARKS / get_current_context()["partition_key"]).write_text("rolled up")

    roll_up()
"""


@pytest.fixture
def rollup(start_method, make_settings, tmp_path, database_url):
    text = DAGS.format(marks="{marks}", hourly=HOURLY)
    settings, marks, _ = parsed_project(
        make_settings, tmp_path, database_url, start_method, "rollup.py", text
    )
    return settings, marks


def hours(day: str, count: int = 24) -> list[str]:
    return [f"{day}T{hour:02}" for hour in range(count)]


def rollup_runs() -> list[tuple[str | None, str]]:
    return partition_runs("daily_rollup")


def test_a_daily_rollup_runs_once_every_hour_of_its_day_arrived(rollup):
    settings, marks = rollup
    check = harness.deadline(180)
    for hour in hours("2026-11-30", 23):
        service.record_event(HOURLY, hour, None)
    Scheduler(settings).run(until=lambda: check() or count(AssetWakeRequest) == 0)
    assert rollup_runs() == []  # 23 of 24 hours: it waits

    service.record_event(HOURLY, "2026-11-30T23", None)
    Scheduler(settings).run(until=lambda: check() or rollup_runs() == [("2026-11-30", "success")])
    assert (marks / "2026-11-30").read_text() == "rolled up"  # the task saw its partition
    assert count(PendingAssetRun) == 0


def test_runs_that_wait_do_not_starve_a_newer_complete_partition(rollup):
    """More waiting days than one loop's budget, requested first: the complete day
    behind them still fires, since answered requests are gone."""
    for day in range(1, 6):  # five days with one hour each: they wait
        service.record_event(HOURLY, f"2026-11-0{day}T00", None)
    for hour in hours("2026-11-20"):
        service.record_event(HOURLY, hour, None)
    bag, fanout = runs.DagBag(), {}
    for _ in range(100):  # a bound, not a budget: each loop answers two requests
        if count(AssetWakeRequest) == 0:
            break
        with orm.session_scope() as session:
            asset_runs.evaluate_requested(session, bag, runs.utcnow(), 2, fanout)
    assert count(AssetWakeRequest) == 0
    assert rollup_runs() == [("2026-11-20", "queued")]
    assert count(PendingAssetRun) == 5  # the five waiting days, evaluated once each


def test_an_idle_loop_issues_one_statement_for_the_claim(rollup):
    from sqlalchemy import event, text

    for hour in hours("2026-11-30", 3):  # pending runs exist, and nothing asks for them
        service.record_event(HOURLY, hour, None)
    bag = runs.DagBag()
    with orm.session_scope() as session:
        asset_runs.evaluate_requested(session, bag, runs.utcnow(), budget=500)
    statements: list[str] = []
    with orm.session_scope() as session:
        session.execute(text("SELECT 1"))  # the transaction has begun: count what follows
        engine = session.get_bind()

        def seen(_conn, _cursor, statement, *_args) -> None:
            statements.append(statement)

        event.listen(engine, "before_cursor_execute", seen)
        try:
            assert asset_runs.evaluate_requested(session, bag, runs.utcnow(), budget=500) == 0
        finally:
            event.remove(engine, "before_cursor_execute", seen)
    assert len(statements) == 1, statements
    assert "asset_wake_request" in statements[0]


def test_a_changed_mapper_re_evaluates_the_dags_pending_runs(rollup, tmp_path):
    settings, _ = rollup
    for hour in hours("2026-11-30", 3):
        service.record_event(HOURLY, hour, None)
    bag = runs.DagBag()
    with orm.session_scope() as session:
        asset_runs.evaluate_requested(session, bag, runs.utcnow(), budget=500)
    assert rollup_runs() == []  # 3 of 24 hours

    # The Dag now runs for any one event of its partition: what it has is enough.
    dag_file = tmp_path / "dags" / "rollup.py"
    dag_file.write_text(dag_file.read_text().replace("HourToDay()", "Identity()")
                        .replace("import Asset,", "import Asset, Identity,"))  # fmt: skip
    assert DagFileProcessorManager(settings).run(once=True)[0].errors == {}
    assert count(AssetWakeRequest) == 1  # the Dag processor's request, for the whole Dag
    with orm.session_scope() as session:
        asset_runs.evaluate_requested(session, runs.DagBag(), runs.utcnow(), budget=500)
    assert rollup_runs() == [("2026-11-30", "queued")]


def test_two_schedulers_claim_disjoint_pending_runs_and_none_fires_twice(
    db_backend, database_url, make_settings, tmp_path, monkeypatch
):
    """Scheduler A holds ten pending runs mid-evaluation while B runs a whole loop with
    the same budget: B finds A's runs held, keeps the requests naming them, refills its
    budget from the next ten requests and fires those."""
    import threading

    if db_backend == "sqlite":
        pytest.skip("SQLite has one writer: a second scheduler waits for the first")
    from spawnflow.models import schema

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "rollup.py").write_text(
        DAGS.format(marks=str(tmp_path), hourly=HOURLY).replace("HourToDay", "Identity")
    )
    settings = make_settings(**{"database.url": database_url, "core.dags_folder": str(dags),
                                "core.load_examples": "false"})  # fmt: skip
    schema.reset(database_url)
    assert DagFileProcessorManager(settings).run(once=True)[0].errors == {}
    with orm.session_scope() as session:  # the Dag processor's request, answered
        asset_runs.evaluate_requested(session, runs.DagBag(), runs.utcnow(), 500)
    for n in range(20):
        service.record_event(HOURLY, f"p{n:02}", None)

    evaluate, holding, b_done = asset_runs._evaluate, threading.Event(), threading.Event()

    def evaluate_holding(session, bag, pending, now, *loaded):
        if threading.current_thread().name == "scheduler-a" and not holding.is_set():
            holding.set()  # A holds its ten claimed runs until B's loop is over
            assert b_done.wait(120), "scheduler B never finished its loop"
        return evaluate(session, bag, pending, now, *loaded)

    monkeypatch.setattr(asset_runs, "_evaluate", evaluate_holding)
    fired: dict[str, int] = {}

    def scheduler(name: str, budget: int) -> None:
        with orm.session_scope() as session:
            fired[name] = asset_runs.evaluate_requested(
                session, runs.DagBag(), runs.utcnow(), budget
            )

    a = threading.Thread(target=scheduler, args=("a", 10), name="scheduler-a")
    a.start()
    assert holding.wait(120), "scheduler A never claimed"
    try:
        scheduler("b", 10)
    finally:
        b_done.set()
        a.join(120)
    assert fired == {"a": 10, "b": 10}
    assert sorted(key for key, _ in rollup_runs()) == [f"p{n:02}" for n in range(20)]
    assert count(AssetWakeRequest) == 0
    assert count(PendingAssetRun) == 0


def test_a_whole_dag_request_fans_out_over_loops(rollup, monkeypatch):
    """Budget 4: a request for the whole rollup Dag (ten waiting days) takes three loops,
    a share at a time, and is answered when the fan-out reaches the end; a request
    written meanwhile is not answered by it, but by a fan-out of its own."""
    from spawnflow.models.assets import AssetWakeRequest as Request

    for day in range(10):  # ten days with one hour each: ten pending runs that wait
        service.record_event(HOURLY, f"2026-11-{day + 10}T00", None)
    bag, fanout = runs.DagBag(), {}
    for _ in range(10):  # a bound: answer the events' own requests
        if count(AssetWakeRequest) == 0:
            break
        with orm.session_scope() as session:
            asset_runs.evaluate_requested(session, bag, runs.utcnow(), 4, fanout)
    assert count(AssetWakeRequest) == 0
    with orm.session_scope() as session:
        session.add(Request(dag_id="daily_rollup", reason="schedule changed"))
    evaluated: list[int] = []
    evaluate = asset_runs._evaluate

    def counting(session, bag, pending, now, *loaded):
        evaluated.append(pending.id)
        return evaluate(session, bag, pending, now, *loaded)

    monkeypatch.setattr(asset_runs, "_evaluate", counting)
    per_loop, left = [], []
    for n in range(6):
        before = len(evaluated)
        with orm.session_scope() as session:
            asset_runs.evaluate_requested(session, bag, runs.utcnow(), 4, fanout)
            if n == 0:  # a second change while the fan-out is half-way
                session.add(Request(dag_id="daily_rollup", reason="schedule changed"))
        per_loop.append(len(evaluated) - before)
        left.append(count(AssetWakeRequest))
    # The first request is answered when its fan-out reached the end; the second one
    # gets a fan-out of its own, over every pending run again.
    assert per_loop == [4, 4, 2, 4, 4, 2]
    assert left == [2, 2, 1, 1, 1, 0]
    assert sorted(evaluated[:10]) == sorted(evaluated[10:])  # each pending run, twice
    assert len(set(evaluated)) == 10
    assert fanout == {}


def test_dags_take_turns_within_the_budget():
    """One Dag asked five times first, another once after: with a budget of two, each
    gets one evaluation in this loop (the busy Dag does not take the whole budget)."""
    from collections import namedtuple

    request = namedtuple("request", "id pending_run_id dag_id")
    requests = [request(n, 100 + n, "busy") for n in range(1, 6)]
    requests += [request(6, 200, "quiet"), request(7, None, "quiet")]
    named, whole = asset_runs._in_turn(requests, budget=2)
    assert named == {1: 101, 6: 200}
    assert whole == {}  # not reached: the quiet Dag's whole request waits for a later loop
    named, whole = asset_runs._in_turn(requests, budget=10)
    assert named == {1: 101, 2: 102, 3: 103, 4: 104, 5: 105, 6: 200}
    assert whole == {"quiet": [7]}
