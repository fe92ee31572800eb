"""``spawnflow dags backfill`` as a real process, under each start method: ten days run
through the scheduler, a Ctrl-C in the middle and the same command again, and a
backfill recorded for a scheduler that is already running."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.oskit import press_ctrl_c
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

DAG = """
import datetime as dt
import time
from pathlib import Path
from spawnflow import Dag, task
from spawnflow.sdk.runtime import get_current_context

MARKS = Path({marks!r})

with Dag("ten_days", schedule="@daily", start_date=dt.datetime(2026, 1, 1), max_active_runs=1):
    @task
    def work():
        day = get_current_context()["logical_date"].day
        if day >= 5:  # from the fifth on, each waits for the gate
            (MARKS / f"started-{{day}}").touch()
            while not (MARKS / "open").exists():
                time.sleep(0.05)
        with open(MARKS / f"done-{{day}}", "a") as file:
            file.write("done\\n")

    work()
"""

RANGE = ["-s", "2026-01-01", "-e", "2026-01-10"]


def project(home: Path, method: str, tmp_path: Path) -> tuple[dict[str, str], str, Path]:
    """A migrated SQLite database, the Dag stored and paused: (environment, URL, marks)."""
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    marks.mkdir()
    dags.mkdir()
    (dags / "ten_days.py").write_text(DAG.format(marks=str(marks)))
    url = f"sqlite:///{(tmp_path / 'backfill.db').as_posix()}"
    env = environment(home, method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false")
    for command in (["db", "migrate"], ["dag-processor", "--once"], ["dags", "pause", "ten_days"]):
        done = spawnflow(*command, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    return env, url, marks


def runs_per_date(url: str) -> dict[str, tuple[int, str]]:
    rows = query(url, "SELECT logical_date, COUNT(*), MIN(state) FROM dag_run "
                      "GROUP BY logical_date")  # fmt: skip
    return {str(moment)[:10]: (count, state) for moment, count, state in rows}


def test_a_ten_day_backfill_stopped_by_ctrl_c_and_resumed_runs_each_date_once(
    start_method, home, tmp_path
):
    env, url, marks = project(home, start_method, tmp_path)
    first = start("dags", "backfill", "ten_days", *RANGE, "--max-active-runs", "2", env=env)
    family = []
    try:
        # Days 1-4 done, days 5 and 6 at the gate: two runs at once, in date order.
        wait_for(lambda: (marks / "started-5").exists() and (marks / "started-6").exists(),
                 what="days 5 and 6 to run")  # fmt: skip
        family = descendants(first)
        press_ctrl_c(first)
        out, err = first.communicate(timeout=120)
    finally:
        kill_if_running(first)
    assert first.returncode == 130, out + err
    assert "Traceback" not in err
    assert all_gone(family), [p for p in family if p.is_running()]
    assert err.splitlines()[-1] == (
        "Backfill 1 stopped; its runs are kept. Resume it with: "
        "spawnflow dags backfill ten_days -s 2026-01-01 -e 2026-01-10"
    )
    assert out.splitlines()[0].startswith("Backfill 1 of Dag 'ten_days' from 2026-01-01")
    assert "Dag 'ten_days' is paused: the backfill runs it anyway." in out
    assert query(url, "SELECT completed_at FROM backfill") == [(None,)]
    stopped = runs_per_date(url)
    assert len(stopped) == 10
    assert [stopped[f"2026-01-0{n}"] for n in range(1, 5)] == [(1, "success")] * 4
    assert not (marks / "done-5").exists()  # cut short, not finished

    (marks / "open").touch()
    again = spawnflow("dags", "backfill", "ten_days", *RANGE, "--max-active-runs", "2", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    lines = again.stdout.splitlines()
    assert lines[0] == (
        "Resuming backfill 1 of Dag 'ten_days' (from 2026-01-01 00:00:00 to "
        "2026-01-10 00:00:00 UTC): 6 of 10 run(s) to go, at most 2 at once."
    )
    assert lines[-2] == "10/10 runs done (10 succeeded, 0 failed), 0 running, 0 queued"
    assert lines[-1] == "Backfill 1 completed: 10 run(s) succeeded, 0 failed."
    # Every date has exactly one run, and its task finished once.
    assert runs_per_date(url) == {f"2026-01-{n:02}": (1, "success") for n in range(1, 11)}
    for n in range(1, 11):
        assert (marks / f"done-{n}").read_text() == "done\n", n
    assert query(url, "SELECT COUNT(*) FROM backfill WHERE completed_at IS NOT NULL") == [(1,)]
    assert query(url, "SELECT DISTINCT run_type FROM dag_run") == [("backfill",)]


def test_a_backfill_recorded_without_waiting_is_run_by_the_scheduler(start_method, home, tmp_path):
    env, url, marks = project(home, start_method, tmp_path)
    (marks / "open").touch()
    recorded = spawnflow("dags", "backfill", "ten_days", "-s", "2026-01-04", "-e",
                         "2026-01-06", "--no-wait", env=env)  # fmt: skip
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    scheduler = spawnflow("scheduler", "--exit-when-idle", env=env)
    assert scheduler.returncode == 0, scheduler.stdout + scheduler.stderr
    assert runs_per_date(url) == {f"2026-01-0{n}": (1, "success") for n in (4, 5, 6)}
    assert query(url, "SELECT COUNT(*) FROM backfill WHERE completed_at IS NOT NULL") == [(1,)]
    assert "backfill completed" in scheduler.stderr


DEFERRING = """
import datetime as dt
from spawnflow import Dag, TaskDeferred, task
from deferral_helpers import SleepyTrigger

with Dag("daily_deferring", schedule="@daily", start_date=dt.datetime(2026, 1, 1)):
    @task
    def sleepy():
        raise TaskDeferred(trigger=SleepyTrigger(0.2), method_name="resume_sleepy")

    sleepy()


def resume_sleepy(event):
    return event
"""


def test_a_backfill_of_a_deferring_dag_gets_a_triggerer_of_its_own(start_method, home, tmp_path):
    from tests.triggerer.harness import write_dags

    dags = tmp_path / "dags"
    write_dags(dags, tmp_path / "gates", tmp_path / "marks")
    (dags / "daily_deferring.py").write_text(DEFERRING)
    url = f"sqlite:///{(tmp_path / 'deferring.db').as_posix()}"
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                      SPAWNFLOW__TRIGGERER__POLL_INTERVAL="0.1")  # fmt: skip
    for command in (["db", "migrate"], ["dag-processor", "--once"]):
        assert spawnflow(*command, env=env).returncode == 0
    done = spawnflow("dags", "backfill", "daily_deferring", "-s", "2026-01-01", "-e",
                     "2026-01-02", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "Backfill 1 completed: 2 run(s) succeeded, 0 failed."
    assert query(url, "SELECT DISTINCT state FROM task_instance") == [("success",)]
