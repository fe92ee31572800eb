"""Dynamic task mapping as a user meets it, under each start method: the Dags of
tests/scheduler/mapping_dags.py run by a real scheduler (``spawnflow standalone``) and
by ``spawnflow dags test``, each as a process of its own."""

from __future__ import annotations

import pytest

from tests.scheduler import mapping_dags
from tests.scheduler.test_e2e import query, spawnflow
from tests.scheduler.test_features_e2e import _environment

pytestmark = pytest.mark.process


def _task_states(url: str, dag_id: str) -> dict[str, list[str]]:
    """Each task's states in map-index order (the Dag's only run)."""
    found: dict[str, list[str]] = {}
    for task_id, _, state in query(
        url,
        "SELECT task_id, map_index, state FROM task_instance "
        f"WHERE dag_id = '{dag_id}' ORDER BY task_id, map_index",
    ):
        found.setdefault(task_id, []).append(state)
    return found


def _map_indexes(url: str, dag_id: str, task_id: str) -> list[int]:
    rows = query(url, "SELECT map_index FROM task_instance WHERE dag_id = "
                 f"'{dag_id}' AND task_id = '{task_id}' ORDER BY map_index")  # fmt: skip
    return [row[0] for row in rows]


def _check_results(marks) -> None:
    # Each downstream task got its mapped upstream's results, in map-index order.
    assert mapping_dags.collected(marks, "literal") == [11, 21, 12, 22, 13, 23]
    assert mapping_dags.collected(marks, "upstream") == [101, 102, 103]
    assert mapping_dags.collected(marks, "kwargs") == ["x1", "y2"]
    assert mapping_dags.most_running(marks) <= 2  # max_active_tis_per_dag=2


def test_a_real_scheduler_expands_mapped_tasks(start_method, home, tmp_path):
    marks = tmp_path / "marks"
    mapping_dags.write(tmp_path / "dags", marks)
    env = _environment(home, start_method, tmp_path)

    done = spawnflow("standalone", "--exit-when-idle", env=env)

    # exits 1: the run of e2e_map_not_a_list failed, as it should
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.splitlines()[-1] == (
        "Done: every due Dag run has finished: 2 succeeded, 1 failed."
    )
    url = env["SPAWNFLOW__DATABASE__URL"]
    for dag_id, states in mapping_dags.STATES.items():
        assert _task_states(url, dag_id) == dict(sorted(states.items())), dag_id
    assert _map_indexes(url, "e2e_mapping", "add") == list(range(6))
    assert _map_indexes(url, "e2e_mapping", "add__2") == [-1]  # skipped: never expanded
    ((reason,),) = query(url, "SELECT reason FROM task_instance WHERE dag_id = "
                         "'e2e_map_not_a_list' AND task_id = 'add'")  # fmt: skip
    assert reason == mapping_dags.NOT_A_LIST
    _check_results(marks)
    # A mapped task over 100 elements: every one ran, and the downstream got them all.
    assert _map_indexes(url, "e2e_map_hundred", "add") == list(range(100))
    assert mapping_dags.collected(marks, "hundred") == list(range(1, 101))
    # Each element's try has a log of its own.
    logs = tmp_path / "logs"
    assert len(list(logs.glob("dag_id=e2e_mapping/run_id=*/task_id=add__1/map_index=*/"
                              "attempt=1.log"))) == 3  # fmt: skip
    _check_the_cli_shows_map_indexes(env)


def _check_the_cli_shows_map_indexes(env: dict[str, str]) -> None:
    states = spawnflow("tasks", "states", "e2e_mapping", "latest", env=env)
    assert states.returncode == 0, states.stderr
    assert states.stdout.splitlines()[0].split()[:4] == ["task", "map", "index", "state"]
    rows = [line.split()[:3] for line in states.stdout.splitlines()[2:]]
    assert ["add__1", "2", "success"] in rows
    assert ["numbers", "success", "1"] in rows  # unmapped: a blank map index

    log = spawnflow("tasks", "logs", "e2e_mapping", "latest", "add__1", "--map-index", "1",
                    env=env)  # fmt: skip
    assert log.returncode == 0, log.stderr
    assert "task started" in log.stdout
    unnamed = spawnflow("tasks", "logs", "e2e_mapping", "latest", "add__1", env=env)
    assert unnamed.returncode == 1
    assert "Task 'add__1' of run" in unnamed.stderr
    assert "is mapped: give --map-index, one of 0 to 2" in unnamed.stderr
    assert "Traceback" not in unnamed.stderr

    xcoms = spawnflow("xcom", "list", "e2e_mapping", "latest", "--task-id", "add__1", env=env)
    assert xcoms.returncode == 0, xcoms.stderr
    assert [line.split()[:2] + line.split()[-1:] for line in xcoms.stdout.splitlines()[2:]] == [
        ["add__1", "0", "101"], ["add__1", "1", "102"], ["add__1", "2", "103"],
    ]  # fmt: skip


@pytest.mark.parametrize("dag_id", ["e2e_mapping", "e2e_map_not_a_list"])
def test_dags_test_expands_mapped_tasks(dag_id, start_method, home, tmp_path):
    marks = tmp_path / "marks"
    mapping_dags.write(tmp_path / "dags", marks)
    env = _environment(home, start_method, tmp_path)

    done = spawnflow("dags", "test", dag_id, env=env)

    failing = dag_id == "e2e_map_not_a_list"
    assert done.returncode == int(failing), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    url = env["SPAWNFLOW__DATABASE__URL"]
    assert _task_states(url, dag_id) == dict(sorted(mapping_dags.STATES[dag_id].items()))
    if failing:
        assert mapping_dags.NOT_A_LIST in done.stdout
    else:
        _check_results(marks)


def test_dags_check_runs_a_mapped_tasks_first_element_and_skips_an_empty_one(
    start_method, home, tmp_path
):
    marks = tmp_path / "marks"
    path = mapping_dags.write(tmp_path / "dags", marks)
    env = _environment(home, start_method, tmp_path)

    done = spawnflow("dags", "check", str(path), "--method", start_method, env=env)

    assert done.returncode == 1, done.stdout + done.stderr  # e2e_map_not_a_list fails
    assert "Traceback" not in done.stderr
    rows = {tuple(line.split()[:2]): line.split()[2] for line in done.stdout.splitlines()
            if line.startswith("e2e_")}  # fmt: skip
    assert rows[("e2e_mapping", "add__2")] == "skipped"
    assert rows[("e2e_mapping", "collect__1")] == "success"
    assert rows[("e2e_map_not_a_list", "add")] == "failed"
    assert (
        "Task 'add' of Dag 'e2e_map_not_a_list' fails under every start method: "
        + mapping_dags.NOT_A_LIST
    ) in done.stderr
    assert "add__2" not in done.stderr  # a skip is no failure
    # Downstream tasks got the list of the one element's result.
    assert mapping_dags.collected(marks, "upstream") == [101]
    assert mapping_dags.collected(marks, "kwargs") == ["x1"]
