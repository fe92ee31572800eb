"""``spawnflow status``: each Dag's newest runs as a grid of task states, what is in
flight and for how long, import errors, and the components' health (issue 15). The
live view is tested through its plain-text rendering, which is what it prints when its
output is not a terminal."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from spawnflow.bootstrap import orm
from spawnflow.commands.status_view import elapsed, plain_text, render
from spawnflow.comms.status import (
    ComponentHealth,
    DagGrid,
    ImportErrorLine,
    RunColumn,
    RunningTask,
    StatusSnapshot,
)
from spawnflow.models import DagRun, TaskInstance
from spawnflow.models.dag import DagFileModel, ImportErrorModel
from spawnflow.models.job import Job
from tests.commands.conftest import STARTED
from tests.commands.test_cli import assert_user_error, run


@pytest.fixture
def busy(one_run, database_url) -> dict[str, str]:
    """``one_run`` and a second run whose task runs, a live scheduler, a triggerer that
    stopped heartbeating, a parsed file and a file that does not import."""
    now = dt.datetime.now(dt.UTC)
    with orm.session_scope(database_url) as session:
        second = DagRun(dag_id="listed", run_id="r2", run_type="scheduled", state="running",
                        logical_date=STARTED + dt.timedelta(days=1), start_date=now)  # fmt: skip
        session.add(second)
        session.flush()
        session.add(TaskInstance(dag_run_id=second.id, dag_id="listed", task_id="only",
                                 state="running", try_number=1,
                                 start_date=now - dt.timedelta(hours=2)))  # fmt: skip
        session.add(Job(job_type="scheduler", hostname="here", pid=41, latest_heartbeat=now))
        session.add(Job(job_type="triggerer", hostname="there", pid=42,
                        latest_heartbeat=now - dt.timedelta(minutes=10)))  # fmt: skip
        session.add(DagFileModel(file_key="k1", fileloc="/dags/listed.py", content_hash="h",
                                 last_parsed=now, duration=0.1, dag_count=1,
                                 outcome="ok"))  # fmt: skip
        error = "Traceback ...\nNameError: name 'x' is not defined\n"
        session.add(ImportErrorModel(file_key="k2", fileloc="/dags/broken.py", error=error))
    return one_run


def section(text: str, title: str) -> list[str]:
    """The lines under ``title`` up to the next blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start + 1 : end]


def test_status_shows_the_grid_what_runs_import_errors_and_health(busy):
    result = run("status", env=busy)  # the runner's output is no terminal: printed once

    assert result.exit_code == 0, result.output
    dags = section(result.stdout, "Dags (newest run on the right)")
    assert dags[0].startswith("listed  @daily, paused  newest r2 (running)")
    # Runs across, oldest first: r1 failed, r2 running; the run's own state on top.
    assert dags[1].split() == ["(run)", "+", ">"]
    assert dags[2].split() == ["only", "x", ">"]
    assert dags[3].startswith("+ success  x failed  > running")

    in_flight = section(result.stdout, "In flight (1)")
    assert in_flight[0].split() == ["dag_id", "run_id", "task_id", "state", "try", "for"]
    assert re.fullmatch(r"listed\s+r2\s+only\s+running\s+1\s+2 h \d\d min", in_flight[1])

    errors = section(result.stdout, "Import errors (1)")
    assert errors[0] == "/dags/broken.py: NameError: name 'x' is not defined"

    health = [line.split() for line in section(result.stdout, "Components")[1:]]
    assert [health[0][0], health[0][-1]] == ["dag-processor", "ok"]
    assert [*health[1][:2], health[1][-1]] == ["scheduler", "here:41", "ok"]
    assert health[2][:2] == ["triggerer", "there:42"]
    assert health[2][-4:] == ["late", "(over", "30", "s)"]  # [triggerer] heartbeat_timeout


def test_status_of_one_dag_and_of_an_unknown_one(busy):
    result = run("status", "--dag-id", "listed", "--runs", "1", env=busy)

    assert result.exit_code == 0, result.output
    assert section(result.stdout, "Dags (newest run on the right)")[1].split() == ["(run)", ">"]
    assert_user_error(run("status", "--dag-id", "lsted", env=busy), "There is no Dag 'lsted'",
                      "did you mean 'listed'?")  # fmt: skip


def test_status_of_an_empty_database_says_what_to_do(migrated_database, database_url):
    result = run("status", env={"SPAWNFLOW__DATABASE__URL": database_url})

    assert result.exit_code == 0, result.output
    assert "No Dags yet: put Dag files in the Dags folder." in result.stdout
    assert "Nothing queued, running or deferred." in result.stdout
    assert "None has shown signs of life: start `spawnflow standalone`." in result.stdout


def test_a_grid_leaves_a_task_blank_in_a_run_without_it():
    taken = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
    grid = DagGrid("grown", "@hourly", False, ["a", "b"], [
        RunColumn("old", "success", None, {"a": "success"}),
        RunColumn("new", "failed", None, {"a": "success", "b": "upstream_failed"}),
    ])  # fmt: skip
    snapshot = StatusSnapshot(taken, [grid], [RunningTask("grown", "new", "b", "queued", 0, None)],
                              [ImportErrorLine("/f.py", "boom")],
                              [ComponentHealth("scheduler", "h", 1, None, 30.0)])  # fmt: skip

    text = plain_text(render(snapshot, headline=["scheduler: 1 active run(s)"]))

    lines = text.splitlines()
    assert lines[:2] == ["spawnflow status at 2026-03-01 12:00:00 UTC",
                         "scheduler: 1 active run(s)"]  # fmt: skip
    dags = section(text, "Dags (newest run on the right)")
    assert [line.rstrip() for line in dags[1:4]] == ["  (run) + x", "  a     + +", "  b       !"]
    assert section(text, "In flight (1)")[1].split() == ["grown", "new", "b", "queued", "0", "-"]
    assert section(text, "Components")[1].split() == ["scheduler", "h:1", "never", "unknown"]


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0, "0 s"), (59.9, "59 s"), (60, "1 min 00 s"), (3599, "59 min 59 s"),
     (7260, "2 h 01 min"), (-3, "0 s")],
)  # fmt: skip
def test_elapsed_reads_as_a_person_would_say_it(seconds, said):
    assert elapsed(dt.timedelta(seconds=seconds)) == said
