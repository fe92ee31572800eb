"""A typo gets a suggestion (issue 15): an unknown command in any group, an Airflow
spelling of a command spawnflow names differently, an unknown Dag id in every command
that takes one, an unknown task id where one is named."""

from __future__ import annotations

import click
import pytest

from spawnflow.bootstrap import orm
from spawnflow.commands import cli
from spawnflow.commands.groups import AIRFLOW_SPELLINGS, Group
from tests.commands import stored_dags
from tests.commands.test_cli import assert_user_error, run, walk

GROUPS = [path for path, command in walk(cli) if isinstance(command, click.Group)]


@pytest.mark.parametrize("path", GROUPS, ids=lambda path: " ".join(path) or "spawnflow")
def test_an_unknown_command_in_any_group_gets_the_closest_name(path):
    group = dict(walk(cli))[path]
    assert isinstance(group, Group)  # one group class, so every group answers alike
    name = sorted(n for n, c in group.commands.items() if not c.hidden)[0]
    typo = name[:-1] + "x"
    result = run(*path, typo)
    error = assert_user_error(result, f"No such command {typo!r}. Did you mean {name!r}?",
                              exit_code=2)  # fmt: skip
    assert error == f"Error: No such command {typo!r}. Did you mean {name!r}?"
    assert "Usage: " in result.stderr


def test_an_unknown_command_like_no_other_gets_no_suggestion():
    result = run("dags", "zzzzzz")
    assert assert_user_error(result, exit_code=2) == "Error: No such command 'zzzzzz'."


@pytest.mark.parametrize("spelling", sorted(AIRFLOW_SPELLINGS))
def test_an_airflow_spelling_points_at_spawnflow_s_command(spelling):
    meant = AIRFLOW_SPELLINGS[spelling]
    result = run(*spelling.split())
    assert_user_error(result, f"Did you mean `spawnflow {meant}` (Airflow's `{spelling}`)?",
                      exit_code=2)  # fmt: skip
    # ... which exists, with its options.
    assert run(*meant.split(), "--help").exit_code == 0


@pytest.fixture
def stored(one_run, database_url) -> dict[str, str]:
    """one_run's Dag 'listed' (a run 'r1' with task 'only') stored with its tasks."""
    with orm.session_scope(database_url) as session:
        stored_dags.store(session, "listed", ["only", "second"], model=False)
    return one_run


#: Every command that takes a Dag id, with the Dag id "lsted" (one typo from "listed").
TAKING_A_DAG = [
    ["dags", "show", "lsted"],
    ["dags", "pause", "lsted"],
    ["dags", "unpause", "lsted"],
    ["dags", "trigger", "lsted"],
    ["dags", "test", "lsted"],
    ["dags", "list-runs", "lsted"],
    ["dags", "list-runs", "-d", "lsted"],
    ["dags", "state", "lsted", "latest"],
    ["dags", "state", "lsted", "r1"],
    ["dags", "next-execution", "lsted"],
    ["dags", "backfill", "lsted", "-s", "2026-01-01", "-e", "2026-01-02", "--dry-run"],
    ["backfills", "list", "--dag-id", "lsted"],
    ["backfills", "cancel", "lsted"],
    ["runs", "list", "--dag-id", "lsted"],
    ["tasks", "list", "lsted"],
    ["tasks", "test", "lsted", "only"],
    ["tasks", "render", "lsted", "only"],
    ["tasks", "states", "lsted", "r1"],
    ["tasks", "logs", "lsted", "r1", "only"],
    ["tasks", "clear", "lsted", "r1", "only"],
    ["tasks", "mark-failed", "lsted", "r1", "only"],
    ["xcom", "list", "lsted", "r1"],
    ["xcom", "get", "lsted", "r1", "only"],
    ["status", "--dag-id", "lsted", "--once"],
]


def test_the_list_holds_every_command_that_takes_a_dag_id():
    paths = {path for path, _ in walk(cli)}
    taking = {path for path, command in walk(cli)
              if any(p.name in ("dag_id", "dag_id_option") for p in command.params)}  # fmt: skip
    listed = {max((tuple(args[:n]) for n in range(len(args)) if tuple(args[:n]) in paths), key=len)
              for args in TAKING_A_DAG}  # fmt: skip
    assert taking == listed


@pytest.mark.parametrize("args", TAKING_A_DAG, ids=" ".join)
def test_an_unknown_dag_id_gets_the_closest_one_in_every_command(stored, tmp_path, args):
    # dags test and tasks test parse the Dags folder once for a Dag they do not know.
    env = {**stored, "SPAWNFLOW__CORE__LOAD_EXAMPLES": "false",
           "SPAWNFLOW__CORE__DAGS_FOLDER": str(tmp_path)}  # fmt: skip
    assert_user_error(run(*args, env=env), "There is no Dag 'lsted'; did you mean 'listed'?")


@pytest.mark.parametrize(
    "args",
    [["tasks", "test", "listed", "onyl"], ["tasks", "render", "listed", "onyl"],
     ["tasks", "logs", "listed", "r1", "onyl"],
     ["tasks", "clear", "listed", "r1", "onyl"],
     ["tasks", "mark-failed", "listed", "r1", "onyl"],
     ["xcom", "list", "listed", "r1", "--task-id", "onyl"],
     ["xcom", "get", "listed", "r1", "onyl"]],
    ids=" ".join,
)  # fmt: skip
def test_an_unknown_task_id_gets_the_closest_one(stored, args):
    assert_user_error(run(*args, env=stored), "no task 'onyl'; did you mean 'only'?")
