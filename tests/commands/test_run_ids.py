"""A run id on the command line may be ``latest``, the start of one run id, or the name
of the run's log folder (issue 15), on every database (LIKE and its escapes differ)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import update

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.paths import folder_name
from spawnflow.models import DagModel, DagRun, TaskInstance
from tests.commands.test_cli import assert_user_error, run

FIRST = "manual__2026-12-01T00:44:19.585418+00:00"
SECOND = "manual__2026-12-01T00:44:20.000001+00:00"
RUN_IDS = [FIRST, SECOND, "scheduled__2026-12-01T00:00:00+00:00", "odd_%!id", "oddx%!id"]


@pytest.fixture
def runs(migrated_database, database_url) -> dict[str, str]:
    """Dag 'named' with the runs above (the last made last), each with one task whose
    reason is its run id; Dag 'empty' with none."""
    when = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    with orm.session_scope(database_url) as session:
        session.add_all([DagModel(dag_id=d, fileloc=f"/dags/{d}.py") for d in ("named", "empty")])
        session.flush()
        for n, run_id in enumerate(RUN_IDS):
            dag_run = DagRun(dag_id="named", run_id=run_id, run_type="manual", state="success",
                             logical_date=when + dt.timedelta(days=n))  # fmt: skip
            session.add(dag_run)
            session.flush()
            session.add(TaskInstance(dag_run_id=dag_run.id, dag_id="named", task_id="only",
                                     state="success", reason=run_id))  # fmt: skip
    return {"SPAWNFLOW__DATABASE__URL": database_url}


def shown(env: dict[str, str], spelling: str) -> str:
    """The run whose task ``tasks states`` shows for ``spelling``."""
    result = run("tasks", "states", "named", spelling, env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[2].split()[-1]


@pytest.mark.parametrize(
    ("spelling", "meant"),
    [
        (FIRST, FIRST),
        ("latest", "oddx%!id"),
        (folder_name("run_id", FIRST), FIRST),  # run_id=manual__2026-12-01T00_44_19.5~<hash>
        (folder_name("run_id", SECOND).removeprefix("run_id="), SECOND),
        ("sched", "scheduled__2026-12-01T00:00:00+00:00"),
        ("odd_", "odd_%!id"),  # "_" is no wildcard here
        ("oddx%", "oddx%!id"),
    ],
)  # fmt: skip
def test_a_run_id_may_be_latest_a_prefix_or_its_log_folder(runs, spelling, meant):
    assert shown(runs, spelling) == meant


def test_a_prefix_of_several_runs_names_them(runs):
    result = run("tasks", "states", "named", "manual", env=runs)
    assert_user_error(result, f"'manual' starts several runs of Dag 'named': {FIRST}, {SECOND}")


def test_latest_of_a_dag_without_runs_says_so(runs):
    result = run("tasks", "states", "empty", "latest", env=runs)
    assert_user_error(result, "Dag 'empty' has no run yet, so none is the latest")


def test_a_spelling_that_means_no_run_is_named(runs):
    result = run("tasks", "states", "named", "nope", env=runs)
    assert_user_error(result, "Dag 'named' has no run 'nope'")


def test_tasks_logs_reads_the_log_of_the_run_latest_names(runs, database_url, home):
    with orm.session_scope(database_url) as session:
        session.execute(update(TaskInstance).values(try_number=1))
    for run_id in RUN_IDS[-2:]:
        log = home / "logs" / folder_name("dag_id", "named") / folder_name("run_id", run_id)
        (log / "task_id=only").mkdir(parents=True)
        line = {"timestamp": "2026-12-01T00:00:00Z", "event": f"ran in {run_id}"}
        (log / "task_id=only" / "attempt=1.log").write_text(json.dumps(line) + "\n")

    result = run("tasks", "logs", "named", "latest", "only", env=runs)

    assert result.exit_code == 0, result.output
    assert "ran in oddx%!id" in result.stdout
