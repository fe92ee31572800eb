"""Clearing mapped tasks, under each start method, through real schedulers: a mapped task
cleared whole expands again over its upstream's new output (shorter: the instances past
its end are removed; longer: the removed ones come back with their tries going on), and
``--map-index`` reruns, fails or reads one instance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scheduler.test_e2e import query, spawnflow
from tests.scheduler.test_features_e2e import _environment

pytestmark = pytest.mark.process

DAG = """
import datetime as dt
import json
from pathlib import Path

from spawnflow import Dag, task

MARKS = Path({marks!r})

with Dag("remap", schedule="@once", start_date=dt.datetime(2026, 1, 1)):

    @task
    def listing():  # as long as the test says, at run time
        return list(range(int((MARKS / "count").read_text())))

    @task
    def double(x):
        return 2 * x

    @task
    def gather(values):
        (MARKS / "gathered.json").write_text(json.dumps(values))

    gather(double.expand(x=listing()))
"""


def _instances(url: str) -> list[tuple[int, str, int]]:
    """``double``'s (map index, state, try number), in map-index order."""
    return [tuple(row) for row in query(url, "SELECT map_index, state, try_number FROM "
            "task_instance WHERE task_id = 'double' ORDER BY map_index")]  # fmt: skip


def _run_until_idle(env: dict[str, str]) -> None:
    done = spawnflow("standalone", "--exit-when-idle", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def _ok(*args: str, env: dict[str, str]) -> str:
    done = spawnflow(*args, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def remap(start_method, home, tmp_path) -> tuple[dict[str, str], str, Path]:
    """The remap Dag run once over a list of 3: (environment, database URL, marks)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "remap.py").write_text(DAG.format(marks=str(marks)))
    env = _environment(home, start_method, tmp_path)
    (marks / "count").write_text("3")
    _run_until_idle(env)
    return env, env["SPAWNFLOW__DATABASE__URL"], marks


def test_a_cleared_mapped_task_expands_again_over_the_new_list(remap):
    env, url, marks = remap
    gathered = marks / "gathered.json"

    assert _instances(url) == [(0, "success", 1), (1, "success", 1), (2, "success", 1)]
    assert json.loads(gathered.read_text()) == [0, 2, 4]

    # Shorter: instance 2 is removed, the others run again as their second try, and the
    # task downstream gets the two results only.
    (marks / "count").write_text("2")
    out = _ok("tasks", "clear", "remap", "latest", "listing", "double", "gather", env=env)
    assert out.strip() == "Cleared listing, double, gather."
    _run_until_idle(env)
    assert _instances(url) == [(0, "success", 2), (1, "success", 2), (2, "removed", 1)]
    assert json.loads(gathered.read_text()) == [0, 2]
    assert _ok("xcom", "list", "remap", "latest", "--task-id", "double", "-o", "json",
               env=env).count('"map_index"') == 2  # fmt: skip

    # Longer: instance 2 comes back (its second try), instance 3 is new.
    (marks / "count").write_text("4")
    _ok("tasks", "clear", "remap", "latest", "listing", "double", "gather", env=env)
    _run_until_idle(env)
    assert _instances(url) == [
        (0, "success", 3), (1, "success", 3), (2, "success", 2), (3, "success", 1)
    ]  # fmt: skip
    assert json.loads(gathered.read_text()) == [0, 2, 4, 6]
    ((state,),) = query(url, "SELECT state FROM dag_run")
    assert state == "success"


def test_map_index_names_one_instance_to_clear_fail_or_read(remap):
    env, url, _ = remap

    value = json.loads(_ok("xcom", "get", "remap", "latest", "double", "--map-index", "2",
                           "-o", "json", env=env))  # fmt: skip
    assert (value["map_index"], value["value"]) == (2, 4)
    for args in (("xcom", "get", "remap", "latest", "double"),
                 ("tasks", "mark-failed", "remap", "latest", "double")):  # fmt: skip
        refused = spawnflow(*args, env=env)
        assert refused.returncode == 1, refused.stdout
        assert "is mapped: give --map-index, one of 0 to 2" in refused.stderr
        assert "Traceback" not in refused.stderr
    missing = spawnflow("xcom", "get", "remap", "latest", "double", "--map-index", "3", env=env)
    assert missing.returncode == 1
    assert "has no map index 3; it has 0 to 2" in missing.stderr
    unmapped = spawnflow("tasks", "clear", "remap", "latest", "listing", "--map-index", "0",
                         env=env)  # fmt: skip
    assert unmapped.returncode == 1
    assert "is not mapped: leave out --map-index" in unmapped.stderr

    # One instance: it runs again over the same element; the others keep their try.
    out = _ok("tasks", "clear", "remap", "latest", "double", "--map-index", "1", env=env)
    assert out.strip() == "Cleared double[1]."
    _run_until_idle(env)
    assert _instances(url) == [(0, "success", 1), (1, "success", 2), (2, "success", 1)]

    out = _ok("tasks", "mark-failed", "remap", "latest", "double", "--map-index", "0", env=env)
    assert out.strip() == "Task 'double' [0] marked failed (it was success)."
    assert _instances(url)[0][:2] == (0, "failed")
