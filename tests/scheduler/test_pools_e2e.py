"""Pools and priority with real processes: two schedulers share a pool's slots, and a
one-slot pool runs the heaviest task first (every start method)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import _server_database
from tests.oskit import press_ctrl_c
from tests.scheduler.test_e2e import environment, query, spawnflow, start, wait_for

pytestmark = pytest.mark.process

DAGS = """
import os
import time
from pathlib import Path
from spawnflow import Dag, PythonTask, task

LOG = Path({log!r})


def mark(line):
    # One write() per line on a file opened for appending: lines of concurrent tasks
    # never interleave, and their order is the order the tasks wrote them in.
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


def work(name):
    mark("start " + name)
    time.sleep(0.5)  # work that lasts: a third task would start meanwhile, if it could
    mark("end " + name)


with Dag("pooled", max_active_tasks=16):
    for n in range(8):
        PythonTask(f"t{{n}}", work, op_args=[f"t{{n}}"], pool="two")


with Dag("ranked", max_active_tasks=16):
    for name, weight in (("light", 1), ("heavy", 10), ("middle", 5), ("heaviest", 20)):
        PythonTask(name, work, op_args=[name], pool="one", priority_weight=weight)


with Dag("mapped", max_active_tasks=16):

    @task
    def listing():
        return [f"m{{n}}" for n in range(10)]

    @task(max_active_tis_per_dag=2)
    def element(name):
        work(name)
        return name

    @task
    def gather(names):
        mark("gathered " + ",".join(names))

    gather(element.expand(name=listing()))
"""


def write_dags(tmp_path: Path) -> tuple[Path, Path]:
    dags, log = tmp_path / "dags", tmp_path / "marks.log"
    dags.mkdir()
    (dags / "pools.py").write_text(DAGS.format(log=str(log)))
    return dags, log


def most_at_once(lines: list[str]) -> int:
    """The most tasks between their start and end marks at any point of the log."""
    running, most = 0, 0
    for line in lines:
        if line.startswith(("start ", "end ")):
            running += 1 if line.startswith("start ") else -1
            most = max(most, running)
    return most


def run_with_schedulers(env: dict[str, str], url: str, dag_id: str, count: int) -> None:
    assert spawnflow("dags", "trigger", dag_id, env=env).returncode == 0
    schedulers = [start("scheduler", env=env) for _ in range(count)]
    try:
        wait_for(lambda: query(url, "SELECT state FROM dag_run") == [("success",)],
                 timeout=240, what=f"the {dag_id} run to finish")  # fmt: skip
    finally:
        for scheduler in schedulers:
            press_ctrl_c(scheduler)
        for scheduler in schedulers:
            scheduler.communicate(timeout=60)


def prepared(home, start_method, tmp_path, url) -> tuple[dict[str, str], Path]:
    dags, log = write_dags(tmp_path)
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                      SPAWNFLOW__EXECUTOR__PARALLELISM="4")  # fmt: skip
    assert spawnflow("db", "reset", "--yes", env=env).returncode == 0
    assert spawnflow("dag-processor", "--once", env=env).returncode == 0
    return env, log


@pytest.mark.parametrize("server", ["postgres", "mysql"])
def test_two_schedulers_never_run_more_tasks_of_a_pool_than_its_slots(
    server, start_method, home, tmp_path, testrun_uid, worker_id
):
    url = _server_database(server, f"spawnflow_test_{testrun_uid[:10]}_{worker_id}")
    env, log = prepared(home, start_method, tmp_path, url)
    assert spawnflow("pools", "set", "two", "2", env=env).returncode == 0

    run_with_schedulers(env, url, "pooled", count=2)

    lines = log.read_text().splitlines()
    assert sorted(line.split()[1] for line in lines if line.startswith("start ")) == [
        f"t{n}" for n in range(8)
    ]  # each ran, once
    assert 1 <= most_at_once(lines) <= 2, lines
    assert query(url, "SELECT DISTINCT pool, pool_slots FROM task_instance") == [("two", 1)]


@pytest.mark.parametrize("server", ["postgres", "mysql"])
def test_two_schedulers_expand_a_mapped_task_once_and_bound_its_running_instances(
    server, start_method, home, tmp_path, testrun_uid, worker_id
):
    url = _server_database(server, f"spawnflow_test_{testrun_uid[:10]}_{worker_id}")
    env, log = prepared(home, start_method, tmp_path, url)

    run_with_schedulers(env, url, "mapped", count=2)

    lines = log.read_text().splitlines()
    started = [line.split()[1] for line in lines if line.startswith("start ")]
    assert sorted(started) == sorted(f"m{n}" for n in range(10))  # each element ran, once
    assert 1 <= most_at_once(lines) <= 2, lines  # max_active_tis_per_dag=2, across both
    assert lines[-1] == "gathered " + ",".join(f"m{n}" for n in range(10))  # in order
    indexes = query(url, "SELECT map_index FROM task_instance WHERE task_id = 'element' "
                         "ORDER BY map_index")  # fmt: skip
    assert [row[0] for row in indexes] == list(range(10))


def test_a_one_slot_pool_runs_the_heaviest_task_first(start_method, home, tmp_path):
    url = f"sqlite:///{(tmp_path / 'ranked.db').as_posix()}"
    env, log = prepared(home, start_method, tmp_path, url)
    assert spawnflow("pools", "set", "one", "1", env=env).returncode == 0

    run_with_schedulers(env, url, "ranked", count=1)

    lines = log.read_text().splitlines()
    assert most_at_once(lines) == 1
    started = [line.split()[1] for line in lines if line.startswith("start ")]
    assert started == ["heaviest", "heavy", "middle", "light"]


def test_a_task_of_a_missing_pool_waits_and_tasks_states_says_why(start_method, home, tmp_path):
    url = f"sqlite:///{(tmp_path / 'missing.db').as_posix()}"
    env, log = prepared(home, start_method, tmp_path, url)
    assert spawnflow("dags", "trigger", "ranked", env=env).returncode == 0
    scheduler = start("scheduler", env=env)
    try:
        wait_for(lambda: query(url, "SELECT count(*) FROM task_instance WHERE reason LIKE "
                                    "'pool ''one'' does not exist%'") == [(4,)],
                 timeout=120, what="the tasks to wait for pool 'one'")  # fmt: skip
        assert query(url, "SELECT DISTINCT state FROM task_instance") == [("scheduled",)]
        (run_id,) = query(url, "SELECT run_id FROM dag_run")[0]
        states = spawnflow("tasks", "states", "ranked", run_id, "-o", "json", env=env)
        reasons = {row["reason"] for row in json.loads(states.stdout)}
        assert reasons == {"pool 'one' does not exist; create it with "
                           "`spawnflow pools set one SLOTS`"}, states.stderr  # fmt: skip
        assert spawnflow("pools", "set", "one", "4", env=env).returncode == 0
        wait_for(lambda: query(url, "SELECT state FROM dag_run") == [("success",)],
                 timeout=240, what="the run to finish once the pool exists")  # fmt: skip
    finally:
        press_ctrl_c(scheduler)
        scheduler.communicate(timeout=60)
    assert log.read_text().count("start ") == 4
