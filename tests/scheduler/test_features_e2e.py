"""Issue 18's features as a user meets them, under each start method: the Dags of
tests/scheduler/feature_dags.py run by a real scheduler (``spawnflow standalone``) and by
``spawnflow dags test``, each as a process of its own; and a warm stop while a task's
callback runs, which keeps the try's outcome."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.oskit import press_ctrl_c
from tests.scheduler import feature_dags
from tests.scheduler.test_e2e import (
    all_gone,
    descendants,
    environment,
    kill_if_running,
    query,
    spawnflow,
    start,
    wait_for,
)

pytestmark = pytest.mark.process


def _environment(home: Path, method: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    url = f"sqlite:///{(tmp_path / 'features.db').as_posix()}"
    env = environment(home, method, url, tmp_path / "dags",
                      SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                      SPAWNFLOW__LOGGING__BASE_LOG_FOLDER=str(tmp_path / "logs"),
                      **extra)  # fmt: skip
    assert spawnflow("db", "migrate", env=env).returncode == 0
    return env


def _states(url: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    runs = dict(query(url, "SELECT dag_id, state FROM dag_run"))
    tasks: dict[str, dict[str, str]] = {}
    for dag_id, task_id, state in query(url, "SELECT dag_id, task_id, state FROM task_instance"):
        tasks.setdefault(dag_id, {})[task_id] = state
    return runs, tasks


def test_a_real_scheduler_runs_branches_groups_callbacks_and_backoff(start_method, home, tmp_path):
    marks = tmp_path / "marks"
    feature_dags.write(tmp_path / "dags", marks)
    env = _environment(home, start_method, tmp_path)

    done = spawnflow("standalone", "--exit-when-idle", env=env)

    # exits 1: the runs of e2e_bad_branch and e2e_timeout failed, as they should
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.splitlines()[-1] == (
        "Done: every due Dag run has finished: 3 succeeded, 2 failed."
    )
    url = env["SPAWNFLOW__DATABASE__URL"]
    runs, tasks = _states(url)
    assert runs == feature_dags.RUN_STATES
    assert tasks == feature_dags.STATES
    reasons = dict(query(url, "SELECT task_id, reason FROM task_instance WHERE dag_id IN "
                              "('e2e_branching', 'e2e_bad_branch', 'e2e_timeout')"))  # fmt: skip
    assert reasons["unwanted.step"] == "branch task 'choose' followed 'wanted'"
    assert reasons["tail.step"] == "short-circuit task 'gate' returned a false value"
    assert reasons["lost"] == feature_dags.BAD_BRANCH
    assert reasons["hangs"] in feature_dags.TIMED_OUT
    feature_dags.check_callbacks_and_backoff(marks, tmp_path / "logs", list(feature_dags.DAG_IDS))
    # The Dag callback that raised is in the scheduler's log, which says which one.
    folders = (home, tmp_path / "logs")
    scheduler_log = "".join(p.read_text() for f in folders for p in f.rglob("scheduler*.log"))
    assert "dag callback failed" in scheduler_log
    assert "RuntimeError: the callback fails on purpose" in scheduler_log


@pytest.mark.parametrize("dag_id", feature_dags.DAG_IDS)
def test_dags_test_runs_branches_groups_callbacks_and_backoff(dag_id, start_method, home, tmp_path):
    marks = tmp_path / "marks"
    feature_dags.write(tmp_path / "dags", marks)
    env = _environment(home, start_method, tmp_path)

    done = spawnflow("dags", "test", dag_id, env=env)

    succeeded = feature_dags.RUN_STATES[dag_id] == "success"
    assert done.returncode == (0 if succeeded else 1), done.stdout + done.stderr
    # The one traceback is that of the Dag callback that raised, which the log shows.
    callback_raised = dag_id == "e2e_callbacks"
    assert done.stderr.count("Traceback") == int(callback_raised), done.stderr
    # The summary table: one row per task with its state.
    shown = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()
             if line.split() and line.split()[0] in feature_dags.STATES[dag_id]}  # fmt: skip
    assert shown == feature_dags.STATES[dag_id], done.stdout
    runs, tasks = _states(env["SPAWNFLOW__DATABASE__URL"])
    assert (runs, tasks) == ({dag_id: feature_dags.RUN_STATES[dag_id]},
                             {dag_id: feature_dags.STATES[dag_id]})  # fmt: skip
    feature_dags.check_callbacks_and_backoff(marks, tmp_path / "logs", [dag_id])
    if dag_id == "e2e_branching":
        assert "branch task 'choose' followed 'wanted'" in done.stdout
    if dag_id == "e2e_bad_branch":
        assert feature_dags.BAD_BRANCH in done.stdout
    if dag_id == "e2e_backoff":
        assert "third_time: up_for_retry" in done.stdout
    if callback_raised:  # the Dag callback ran in its child before dags test ended
        (line,) = [line for line in done.stderr.splitlines() if "dag callback failed" in line]
        assert "e2e_callbacks" in line


HELD_CALLBACK = """
import time
from pathlib import Path

from spawnflow import Dag, task

MARKS = Path({marks!r})


def hold(context):
    (MARKS / "callback-started").touch()
    deadline = time.monotonic() + 600
    while not (MARKS / "open").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    (MARKS / "callback-ended").touch()


with Dag("held_callback"):

    @task(on_success_callback=hold)
    def quick():
        return "done"

    quick()
"""


def test_a_warm_stop_during_a_tasks_callback_keeps_the_tries_outcome(start_method, home, tmp_path):
    """The try succeeded; the stop cuts its callback short after most of the grace
    period, and the task instance stays a success (it was failed as 'stopped because
    spawnflow shut down' before)."""
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    marks.mkdir()
    dags.mkdir()
    (dags / "held_callback.py").write_text(HELD_CALLBACK.format(marks=str(marks)))
    env = _environment(home, start_method, tmp_path, SPAWNFLOW__CORE__STOP_GRACE_PERIOD="3")
    assert spawnflow("dag-processor", "--once", env=env).returncode == 0
    assert spawnflow("dags", "trigger", "held_callback", env=env).returncode == 0
    scheduler = start("scheduler", env=env)
    family = []
    try:
        wait_for(lambda: (marks / "callback-started").exists(), what="the callback to run")
        family = descendants(scheduler)
        press_ctrl_c(scheduler)
        _, err = scheduler.communicate(timeout=120)
    finally:
        kill_if_running(scheduler)
    assert scheduler.returncode == 130, err
    assert "Traceback" not in err
    assert all_gone(family), [p for p in family if p.is_running()]
    assert not (marks / "callback-ended").exists()  # cut short, never released
    url = env["SPAWNFLOW__DATABASE__URL"]
    ti = query(url, "SELECT state, reason FROM task_instance WHERE task_id = 'quick'")
    assert ti == [("success", None)]
    log = feature_dags.try_log(tmp_path / "logs", "held_callback", "quick")
    assert "stopped during the task's callbacks: spawnflow is shutting down" in log, log
