"""Disks that refuse writes: one sentence at start-up, logging that degrades while
running, workers that cannot boot not restarted in a loop, no run left ``running``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.faults.readonly import read_only
from tests.scheduler.test_e2e import environment, query, spawnflow

pytestmark = pytest.mark.process

DAGS = """
from pathlib import Path
from spawnflow import Dag, task

MARKS = Path({marks!r})

with Dag("one"):
    @task
    def write_a_mark():
        with open(MARKS / "one", "a") as marker:
            marker.write("ran\\n")

    write_a_mark()
"""

#: Every command that runs Dags, as a user would start it (each ends by itself).
WORKING_COMMANDS = {
    "dag-processor": ("dag-processor", "--once"),
    "scheduler": ("scheduler", "--exit-when-idle"),
    "standalone": ("standalone", "--exit-when-idle"),
    "dags-test": ("dags", "test", "one"),
}


@pytest.fixture
def project(home, tmp_path, start_method):
    """(environment, database URL, marks folder): migrated, Dags parsed, logs made."""
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    marks.mkdir()
    dags.mkdir()
    (dags / "one.py").write_text(DAGS.format(marks=str(marks)))
    url = f"sqlite:///{(home / 'spawnflow.db').as_posix()}"
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false")
    assert spawnflow("db", "migrate", env=env).returncode == 0
    assert spawnflow("dag-processor", "--once", env=env).returncode == 0
    assert (home / "logs").is_dir()
    return env, url, marks


def one_sentence(done) -> str:
    """The command's error: exit code 1, no traceback, one ``Error:`` line last."""
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: "), done.stderr
    return last


def no_run_left_running(url: str) -> None:
    """Nothing is left as if it ran (a run only triggered waits, queued, for a scheduler)."""
    assert query(url, "SELECT state FROM dag_run WHERE state = 'running'") == []
    assert query(url, "SELECT state FROM task_instance WHERE state IN ('queued', 'running')") == []


@pytest.mark.parametrize("command", WORKING_COMMANDS)
def test_a_read_only_logs_folder_is_one_sentence_at_start_up(project, home, command):
    env, url, marks = project
    with read_only(home / "logs"):
        done = spawnflow(*WORKING_COMMANDS[command], env=env)
    last = one_sentence(done)
    assert str(home / "logs") in last
    assert "Read-only file system" in last or "Permission denied" in last
    assert not (marks / "one").exists()  # checked before anything ran
    no_run_left_running(url)


@pytest.mark.parametrize("command", [*WORKING_COMMANDS, "dags-trigger"])
def test_a_read_only_sqlite_file_is_one_sentence(project, home, command):
    env, url, _ = project
    args = ("dags", "trigger", "one") if command == "dags-trigger" else WORKING_COMMANDS[command]
    with read_only(home / "spawnflow.db"):
        done = spawnflow(*args, env=env)
    last = one_sentence(done)
    assert str(home / "spawnflow.db") in last
    assert "writable" in last
    no_run_left_running(url)


@pytest.mark.parametrize("command", [*WORKING_COMMANDS, "dags-trigger"])
def test_a_read_only_home_is_one_sentence(project, home, command):
    """The logs and the SQLite file live in the home: whichever is needed first is named."""
    env, url, marks = project
    args = ("dags", "trigger", "one") if command == "dags-trigger" else WORKING_COMMANDS[command]
    with read_only(home):
        done = spawnflow(*args, env=env)
    last = one_sentence(done)
    assert str(home) in last
    assert "writable" in last
    assert not (marks / "one").exists()
    no_run_left_running(url)
    assert query(url, "SELECT count(*) FROM dag_run") == [(0,)]  # nothing half-written


@pytest.mark.parametrize("command", ["scheduler", "dags-test"])
def test_workers_that_cannot_write_their_log_are_given_up_on_not_looped(project, home, command):
    """The logs folder is fine, the workers' log file is not: each worker fails to boot,
    is replaced after a pause, and the third failure ends the command with its reason."""
    env, url, marks = project
    worker_log = home / "logs" / "executor-worker.log"
    worker_log.touch()
    spawnflow("dags", "trigger", "one", env=env)
    with read_only(worker_log):
        done = spawnflow(*WORKING_COMMANDS[command], env=env)
    last = one_sentence(done)
    assert "executor-worker" in last
    assert "could not boot (logging)" in last
    assert str(worker_log) in last
    if command == "dags-test":  # it logs on the console only
        tries = done.stderr.count("worker could not boot")
    else:
        scheduler_log = (home / "logs" / "scheduler.log").read_text()
        tries = scheduler_log.count('"event":"worker could not boot"')
    assert tries == 3, done.stderr
    assert not (marks / "one").exists()
    no_run_left_running(url)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/dev/full is Linux's")
def test_a_log_file_that_fills_up_while_running_degrades_logging_only(project, home):
    """Every write to the scheduler's and the workers' log files fails (/dev/full says
    "No space left on device"): each process says so once and the run still finishes."""
    env, url, marks = project
    for role in ("scheduler", "executor-worker"):
        log_file = home / "logs" / f"{role}.log"
        log_file.unlink(missing_ok=True)
        log_file.symlink_to(Path("/dev/full"))
    assert spawnflow("dags", "trigger", "one", env=env).returncode == 0
    done = spawnflow("scheduler", "--exit-when-idle", env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("cannot write the log file") >= 1
    assert (marks / "one").read_text() == "ran\n"
    assert query(url, "SELECT state FROM dag_run") == [("success",)]
