"""Commands under the names Airflow users type (issue 15): ``dags list-runs``, ``dags
state``, ``dags next-execution`` and ``tasks list`` print what spawnflow knows, the
first exactly what the spawnflow command it stands for prints."""

from __future__ import annotations

import datetime as dt

import pytest

from spawnflow import Asset
from spawnflow.bootstrap import orm
from tests.commands import stored_dags
from tests.commands.conftest import STARTED
from tests.commands.test_cli import assert_user_error, run

#: Far enough ahead that its first runs are the same whenever the test runs.
FUTURE = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
JANUARY = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def dags(one_run, database_url) -> dict[str, str]:
    """one_run's paused Dag 'listed' stored with tasks 'only' then 'second', and Dags
    on each kind of schedule: 'future' (daily from 2100), 'caught_up' (daily with
    catchup, its last scheduled run on January 5th), 'manual_one' (None), 'on_assets',
    'once_done' (@once, which has had its run)."""
    with orm.session_scope(database_url) as session:
        stored_dags.store(session, "listed", ["only", "second"], model=False,
                          schedule="@daily", start_date=JANUARY)  # fmt: skip
        stored_dags.store(session, "future", ["a"], schedule="@daily", start_date=FUTURE)
        stored_dags.store(session, "caught_up", ["a"], schedule="@daily", start_date=JANUARY,
                          catchup=True)  # fmt: skip
        stored_dags.scheduled_run(session, "caught_up", JANUARY + dt.timedelta(days=4))
        stored_dags.store(session, "manual_one", ["a"])
        stored_dags.store(session, "on_assets", ["a"], schedule=Asset("s3://bucket/orders"))
        stored_dags.store(session, "once_done", ["a"], schedule="@once", start_date=JANUARY)
        stored_dags.scheduled_run(session, "once_done", JANUARY)
    return one_run


@pytest.mark.parametrize(
    "alias",
    [["dags", "list-runs", "listed"], ["dags", "list-runs", "-d", "listed"],
     ["dags", "list-runs", "--dag-id", "listed", "listed"]],
)  # fmt: skip
@pytest.mark.parametrize("output", ["table", "json"])
def test_dags_list_runs_prints_what_runs_list_prints(dags, alias, output):
    meant = run("runs", "list", "--dag-id", "listed", "-o", output, env=dags)
    assert meant.exit_code == 0, meant.output
    assert "r1" in meant.stdout
    said = run(*alias, "-o", output, env=dags)
    assert said.exit_code == 0, said.output
    assert said.stdout == meant.stdout


def test_dags_list_runs_without_a_dag_lists_every_dag_s_runs_as_runs_list_does(dags):
    assert run("dags", "list-runs", env=dags).stdout == run("runs", "list", env=dags).stdout


def test_dags_list_runs_refuses_two_different_dags(dags):
    result = run("dags", "list-runs", "listed", "-d", "future", env=dags)
    assert_user_error(result, "two Dags given: 'listed' and --dag-id 'future'", exit_code=2)


def test_tasks_list_prints_the_task_ids_in_the_order_dags_show_lists_them(dags):
    result = run("tasks", "list", "listed", env=dags)
    assert result.exit_code == 0, result.output
    assert result.stdout == "only\nsecond\n"


@pytest.mark.parametrize(
    "spelling",
    ["r1", "latest", "r", STARTED.isoformat(), "2026-01-02T03:04:05", "2026-01-02 04:04:05+01:00"],
)  # fmt: skip
def test_dags_state_prints_the_state_of_the_run_named_by_id_or_logical_date(dags, spelling):
    result = run("dags", "state", "listed", spelling, env=dags)
    assert result.exit_code == 0, result.output
    assert result.stdout == "success\n"


def test_dags_state_of_a_date_without_a_run_names_it(dags):
    result = run("dags", "state", "listed", "2026-01-03", env=dags)
    assert_user_error(result, "Dag 'listed' has no run '2026-01-03'", "spawnflow runs list")


def test_dags_next_execution_prints_the_next_logical_dates(dags):
    result = run("dags", "next-execution", "future", "--num-executions", "3", env=dags)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "2100-01-01T00:00:00+00:00", "2100-01-02T00:00:00+00:00", "2100-01-03T00:00:00+00:00"
    ]  # fmt: skip
    assert result.stderr == ""
    one = run("dags", "next-execution", "future", env=dags)
    assert one.stdout == "2100-01-01T00:00:00+00:00\n"


def test_dags_next_execution_goes_on_from_the_last_scheduled_run(dags):
    result = run("dags", "next-execution", "caught_up", "-n", "2", env=dags)
    assert result.stdout.splitlines() == ["2026-01-06T00:00:00+00:00", "2026-01-07T00:00:00+00:00"]


def test_dags_next_execution_reminds_that_a_dag_is_paused(dags):
    result = run("dags", "next-execution", "listed", env=dags)
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 1
    assert result.stderr == (
        "Dag 'listed' is paused: the scheduler creates none of these runs until it is unpaused.\n"
    )


@pytest.mark.parametrize(
    ("dag_id", "why"),
    [
        ("manual_one", "its schedule is None (it runs only when triggered)"),
        ("on_assets", "it runs when its assets are updated, not at a time (assets: "),
        ("once_done", "its schedule (@once) creates no more runs"),
    ],
)
def test_dags_next_execution_of_a_schedule_without_a_next_time_says_so(dags, dag_id, why):
    result = run("dags", "next-execution", dag_id, env=dags)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"Dag {dag_id!r} has no next logical date: {why}")
