"""``spawnflow dags backfill`` in process (click's runner): bad input and the dry run.
Runs through the scheduler, stopped and resumed: tests/scheduler/test_backfill_e2e.py."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import func, select

from spawnflow.bootstrap import orm
from spawnflow.models.backfill import Backfill
from spawnflow.models.run import DagRun
from tests.commands import stored_dags
from tests.commands.test_cli import assert_user_error, run

RANGE = ("-s", "2026-01-01", "-e", "2026-01-05")


@pytest.fixture
def env(migrated_database, database_url) -> dict[str, str]:
    """A paused daily Dag with a failed run on 2 January; the environment that finds it."""
    with orm.session_scope(database_url) as session:
        stored_dags.store(session, "daily", ["a"], paused=True, schedule="@daily",
                          start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))  # fmt: skip
        moment = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
        session.add(DagRun(dag_id="daily", run_id="scheduled__2026-01-02", run_type="scheduled",
                           state="failed", logical_date=moment, conf="{}"))  # fmt: skip
    return {"SPAWNFLOW__DATABASE__URL": database_url}


def written() -> tuple[int, int]:
    with orm.session_scope(write=False) as session:
        return (session.scalar(select(func.count()).select_from(Backfill)),
                session.scalar(select(func.count()).select_from(DagRun)))  # fmt: skip


def test_a_dry_run_lists_each_date_and_why_and_writes_nothing(env):
    result = run("dags", "backfill", "daily", *RANGE, "--reprocess-behavior", "failed",
                 "--max-active-runs", "2", "--dry-run", env=env)  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "Dry run: a backfill of Dag 'daily' from 2026-01-01 00:00:00 to 2026-01-05 00:00:00 "
        "UTC would create 4 run(s), run 1 again and skip 0 date(s), at most 2 at once. "
        "Nothing was written."
    )
    rows = [line.split(None, 3) for line in lines[3:8]]
    assert [row[2] for row in rows] == ["create", "run", "create", "create", "create"]
    assert lines[4].split()[2:] == ["run", "again", "scheduled__2026-01-02", "its", "run",
                                    "failed"]  # fmt: skip
    assert lines[3].split()[3] == "backfill__2026-01-01T00:00:00+00:00"
    assert lines[-1] == "Dag 'daily' is paused: a backfill runs it anyway."
    assert written() == (0, 1)


def test_a_dry_run_says_why_a_date_is_skipped(env):
    result = run("dags", "backfill", "daily", *RANGE, "--dry-run", env=env)
    assert result.exit_code == 0, result.output
    skipped = [line for line in result.stdout.splitlines()[3:] if " skip " in line]
    assert len(skipped) == 1
    assert skipped[0].split(None, 4)[2:] == [
        "skip",
        "scheduled__2026-01-02",
        "its run failed (--reprocess-behavior none)",
    ]


def test_no_wait_records_the_backfill_for_the_scheduler(env):
    result = run("dags", "backfill", "daily", *RANGE, "--no-wait", env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "Backfill 1 of Dag 'daily' from 2026-01-01 00:00:00 to 2026-01-05 00:00:00 UTC: "
        "4 new run(s), 0 to run again, 1 date(s) skipped; at most 16 at once.",
        "  skipped 2026-01-02 00:00:00: its run failed (--reprocess-behavior none)",
        "Dag 'daily' is paused: the backfill runs it anyway.",
        "The scheduler runs them (`spawnflow scheduler` or `spawnflow standalone`).",
    ]
    assert written() == (1, 5)
    listed = run("runs", "list", "--dag-id", "daily", env=env).stdout.splitlines()
    assert [line.split()[2:4] for line in listed[2:]] == [["backfill", "queued"]] * 3 + [
        ["scheduled", "failed"], ["backfill", "queued"]
    ]  # fmt: skip
    # The same command again: the unfinished backfill is the one, nothing new is written.
    again = run("dags", "backfill", "daily", *RANGE, "--no-wait", env=env)
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith("Resuming backfill 1 of Dag 'daily' (from 2026-01-01 00:00:00 "
                                   "to 2026-01-05 00:00:00 UTC): 4 of 4 run(s) to go")  # fmt: skip
    assert written() == (1, 5)


def test_backfill_runs_are_listed_with_their_type_and_named_by_their_id(env):
    assert run("dags", "backfill", "daily", *RANGE, "--no-wait", env=env).exit_code == 0
    as_json = run("runs", "list", "--dag-id", "daily", "-o", "json", env=env).stdout
    assert as_json.count('"run_type": "backfill"') == 4
    listed = run("dags", "list-runs", "daily", env=env).stdout.splitlines()
    assert listed[2].split()[1:3] == ["backfill__2026-01-05T00:00:00+00:00", "backfill"]
    for spelling in ("backfill__2026-01-01T00:00:00+00:00", "backfill__2026-01-01"):
        states = run("tasks", "states", "daily", spelling, env=env)
        assert states.stdout == "The run has no task instances.\n", states.output  # queued


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (["dialy", *RANGE], "There is no Dag 'dialy'; did you mean 'daily'?", 1),
        (["daily", "-s", "2026-01-05", "-e", "2026-01-01"],
         "--end-date 2026-01-01 is before --start-date 2026-01-05.", 1),
        (["daily", "-s", "2026-13-01", "-e", "2026-01-01"],
         "Invalid value for '-s' / '--start-date': '2026-13-01' is not a date", 2),
        (["daily", "-s", "2026-01-01", "-e", "yesterday"],
         "Invalid value for '-e' / '--end-date': 'yesterday' is not a date", 2),
        (["daily", *RANGE, "--max-active-runs", "0"],
         "Invalid value for --max-active-runs: must be 1 or more, not 0", 2),
        (["daily", *RANGE, "--reprocess-behavior", "all"],
         "Invalid value for '--reprocess-behavior'", 2),
        (["daily", *RANGE, "--conf", "[1]"], "Invalid value for --conf: must be a JSON object", 2),
    ],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["--dry-run", "--no-wait", "wait"])
def test_bad_input_is_one_sentence_and_writes_nothing(env, args, message, code, mode):
    extra = [] if mode == "wait" else [mode]
    result = run("dags", "backfill", *args, *extra, env=env)
    assert_user_error(result, message, exit_code=code)
    assert written() == (0, 1)


def test_a_second_range_is_refused_while_one_is_unfinished(env):
    assert run("dags", "backfill", "daily", *RANGE, "--no-wait", env=env).exit_code == 0
    result = run("dags", "backfill", "daily", "-s", "2026-01-06", "-e", "2026-01-09", env=env)
    assert_user_error(result, "Dag 'daily' has an unfinished backfill (id 1) from 2026-01-01 "
                      "to 2026-01-05; resume it by running")  # fmt: skip


def run_states() -> dict[str, str]:
    with orm.session_scope(write=False) as session:
        return dict(session.execute(select(DagRun.run_id, DagRun.state)).all())


def test_cancel_fails_the_runs_not_started_lets_the_running_finish_and_frees_the_dag(env):
    """As Airflow 3 cancels a backfill: queued runs end failed, a running one goes on,
    and the backfill is completed, so that another range is accepted."""
    assert run("dags", "backfill", "daily", *RANGE, "--no-wait", env=env).exit_code == 0
    started = "backfill__2026-01-01T00:00:00+00:00"
    with orm.session_scope() as session:  # the scheduler started one of its runs
        session.scalars(select(DagRun).where(DagRun.run_id == started)).one().state = "running"
    listed = run("backfills", "list", env=env)
    assert listed.exit_code == 0, listed.output
    row = listed.stdout.splitlines()[2].split()
    assert row[:2] + row[4:] == ["1", "daily", "4", "0", "0", "1", "3", "no"]

    result = run("backfills", "cancel", "daily", env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "Cancelled backfill 1 of Dag 'daily' (2026-01-01 to 2026-01-05): 3 run(s) that had "
        "not started failed, 1 running run(s) finish.\n"
    )
    states = run_states()
    assert states.pop(started) == "running"
    assert states.pop("scheduled__2026-01-02") == "failed"  # not the backfill's: as it was
    assert sorted(states.values()) == ["failed"] * 3
    as_json = run("backfills", "list", "--dag-id", "daily", "-o", "json", env=env).stdout
    (record,) = json.loads(as_json)
    assert (record["failed"], record["running"], record["queued"]) == (3, 1, 0)
    assert record["completed_at"] is not None
    again = run("dags", "backfill", "daily", "-s", "2026-01-06", "-e", "2026-01-07", "--no-wait",
                env=env)  # fmt: skip
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith("Backfill 2 of Dag 'daily'")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["cancel", "daily"], "Dag 'daily' has no unfinished backfill to cancel."),
        (["cancel", "dialy"], "There is no Dag 'dialy'; did you mean 'daily'?"),
        (["list", "--dag-id", "dialy"], "There is no Dag 'dialy'; did you mean 'daily'?"),
    ],
)
def test_backfills_bad_input_is_one_sentence(env, args, message):
    assert_user_error(run("backfills", *args, env=env), message)
    assert written() == (0, 1)
    assert run_states() == {"scheduled__2026-01-02": "failed"}
