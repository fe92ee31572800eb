"""``dags trigger | test``, ``runs list``, ``tasks ...`` and ``variables ...`` from the CLI."""

from __future__ import annotations

import re

import pytest

from tests.commands.test_cli import assert_user_error, run
from tests.scheduler import harness

pytestmark = pytest.mark.process


@pytest.fixture
def project(tmp_path, home, start_method) -> dict[str, str]:
    harness.write_dags(tmp_path / "dags", tmp_path / "marks")
    env = {
        "SPAWNFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"),
        "SPAWNFLOW__CORE__MP_START_METHOD": start_method,
        "SPAWNFLOW__EXECUTOR__PARALLELISM": "2",
        "SPAWNFLOW__EXECUTOR__HEARTBEAT_INTERVAL": "0.2",
        "SPAWNFLOW__SCHEDULER__LOOP_INTERVAL": "0.1",
    }
    assert run("db", "migrate", env=env).exit_code == 0
    return env


def test_dags_test_runs_a_dag_and_shows_a_summary(project):
    result = run("dags", "test", "example_etl", "--conf", '{"who": "me"}', env=project)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # Each change as it happens, with the time (UTC) and how long the try ran.
    assert any(re.fullmatch(r"\d\d:\d\d:\d\d  load: success after \d+\.\d\d s", line)
               for line in lines), lines  # fmt: skip
    assert re.fullmatch(r"\d\d:\d\d:\d\d  run 'manual__.*' of Dag 'example_etl' created", lines[0])
    assert lines[-1].startswith("Run 'manual__")
    assert ": success (" in lines[-1]
    summary = [line.split()[:3] for line in lines if line.startswith(("extract", "transform"))]
    assert summary == [["extract", "success", "1"], ["transform", "success", "1"]]


def test_a_failing_dag_test_exits_one(project):
    result = run("dags", "test", "bad_xcom", env=project)
    assert result.exit_code == 1
    assert "returns_an_object  failed" in result.stdout
    # The end of the failed try's log, then the command that shows all of it.
    tail = result.stdout[result.stdout.index("Task 'returns_an_object' failed; its log") :]
    assert "task finished state=failed" in tail
    command = tail.splitlines()[-1]
    assert command.startswith("All of it: spawnflow tasks logs bad_xcom manual__")
    log = run(*command.removeprefix("All of it: spawnflow ").split(), env=project)
    assert log.exit_code == 0, log.output
    assert "task finished state=failed" in log.stdout


def test_trigger_runs_states_and_logs(project):
    assert run("dag-processor", "--once", env=project).exit_code == 0
    triggered = run("dags", "trigger", "example_etl", env=project)
    assert triggered.exit_code == 0
    run_id = triggered.stdout.split("'")[1]

    listed = run("runs", "list", "--dag-id", "example_etl", env=project).stdout.splitlines()
    assert listed[2].split()[:4] == ["example_etl", run_id, "manual", "queued"]
    states = run("tasks", "states", "example_etl", run_id, env=project).stdout.splitlines()
    assert [line.split()[:2] for line in states[2:]] == []  # queued: no task instances yet

    assert run("scheduler", "--exit-when-idle", env=project).exit_code == 0
    states = run("tasks", "states", "example_etl", run_id, env=project).stdout.splitlines()
    assert [line.split()[:3] for line in states[2:]] == [
        ["extract", "success", "1"], ["transform", "success", "1"], ["load", "success", "1"],
    ]  # fmt: skip
    log = run("tasks", "logs", "example_etl", run_id, "load", env=project).stdout
    assert "[stdout] ada: 15.75" in log
    assert "task succeeded" in log

    cleared = run("tasks", "clear", "example_etl", run_id, "load", env=project)
    assert cleared.stdout == "Cleared load.\n"
    failed = run("tasks", "mark-failed", "example_etl", run_id, "load", env=project)
    assert failed.stdout == "Task 'load' marked failed (it was none).\n"


def test_tasks_test_runs_one_task_and_writes_nothing(project):
    result = run("tasks", "test", "example_etl", "extract", env=project)
    assert result.exit_code == 0, result.output
    assert "XCom return_value: [{'customer': 'ada', 'amount': 12.5}" in result.stdout
    assert result.stdout.splitlines()[-1] == "Task 'extract': success"
    assert run("runs", "list", env=project).stdout == "No Dag runs yet.\n"


def test_variables(project):
    assert (
        run("variables", "set", "city", "Lisbon", "--description", "where", env=project).exit_code
        == 0
    )
    assert run("variables", "get", "city", env=project).stdout == "Lisbon\n"
    assert "city  Lisbon  where" in run("variables", "list", env=project).stdout
    assert run("variables", "delete", "city", env=project).exit_code == 0
    assert_user_error(run("variables", "get", "city", env=project), "There is no Variable 'city'")


@pytest.mark.parametrize(
    ("args", "fragment", "code"),
    [
        (
            ["dags", "trigger", "example_etl", "--conf", "{nope"],
            "Invalid value for --conf: not JSON",
            2,
        ),
        (["dags", "trigger", "example_etl", "--conf", "[1]"], "must be a JSON object", 2),
        (["dags", "trigger", "no_such_dag"], "There is no Dag 'no_such_dag'", 1),
        (["tasks", "states", "example_etl", "nope"], "Dag 'example_etl' has no run 'nope'", 1),
    ],
)
def test_bad_run_commands_are_one_sentence(project, args, fragment, code):
    assert run("dag-processor", "--once", env=project).exit_code == 0
    assert_user_error(run(*args, env=project), fragment, exit_code=code)


BRANCHING = """
from spawnflow import Dag, TaskGroup, task

with Dag("branch_cli"):
    @task.branch
    def pick():
        return "wanted"

    @task
    def step():
        return 1

    with TaskGroup("wanted") as wanted:
        step() >> step()
    with TaskGroup("unwanted") as unwanted:
        step()
    pick() >> [wanted, unwanted]
"""


def test_dags_test_follows_a_branch_into_a_task_group_and_skips_the_other(project, tmp_path):
    (tmp_path / "dags" / "branch_cli.py").write_text(BRANCHING, encoding="utf-8")

    result = run("dags", "test", "branch_cli", env=project)

    assert result.exit_code == 0, result.output
    summary = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()
               if line.startswith(("pick", "wanted.", "unwanted."))}  # fmt: skip
    assert summary == {"pick": "success", "wanted.step": "success",
                       "wanted.step__1": "success", "unwanted.step": "skipped"}  # fmt: skip
    assert "branch task 'pick' followed 'wanted'" in result.stdout
