"""Mapping a task class, as Airflow maps classic operators (``CommandTask.partial(...)
.expand(command=[...])``), under each start method: through ``spawnflow dags test`` and
``spawnflow tasks test``, each as a process of its own."""

from __future__ import annotations

import pytest

from tests.scheduler.test_e2e import query, spawnflow
from tests.scheduler.test_features_e2e import _environment

pytestmark = pytest.mark.process

DAG = """
from spawnflow import CommandTask, Dag, task

with Dag("classic"):

    @task
    def commands():
        return ["echo alpha", "echo beta"]

    @task
    def numbers():
        return [1]

    @task
    def gather(lines):
        return lines

    literal = CommandTask.partial(task_id="literal").expand(command=["echo one", "echo two"])
    gather(literal)
    CommandTask.partial(task_id="upstream").expand(command=commands())
    CommandTask.partial(task_id="not_a_command").expand(command=numbers())
"""


@pytest.fixture
def classic(start_method, home, tmp_path) -> dict[str, str]:
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "classic.py").write_text(DAG)
    return _environment(home, start_method, tmp_path)


def test_a_mapped_command_task_runs_each_command(classic):
    done = spawnflow("dags", "test", "classic", env=classic)

    assert done.returncode == 1, done.stdout + done.stderr  # not_a_command failed
    assert "Traceback" not in done.stderr
    url = classic["SPAWNFLOW__DATABASE__URL"]
    rows = query(url, "SELECT ti.task_id, ti.map_index, ti.state, x.value FROM task_instance ti "
                      "LEFT JOIN xcom x ON x.task_instance_id = ti.id "
                      "ORDER BY ti.task_id, ti.map_index")  # fmt: skip
    found = {(task_id, index): (state, value) for task_id, index, state, value in rows}
    assert found[("literal", 0)] == ("success", '"one"')
    assert found[("literal", 1)] == ("success", '"two"')
    assert found[("upstream", 0)] == ("success", '"alpha"')
    assert found[("upstream", 1)] == ("success", '"beta"')
    assert found[("gather", -1)] == ("success", '["one","two"]')
    ((reason,),) = query(url, "SELECT reason FROM task_instance WHERE task_id = 'not_a_command'")
    assert reason == "the mapped command is 1, not a non-empty string"
    # tasks render shows a mapped task's first instance.
    rendered = spawnflow("tasks", "render", "classic", "upstream", env=classic)
    assert rendered.returncode == 0, rendered.stderr
    assert "echo alpha" in rendered.stdout


def test_tasks_test_runs_one_instance_of_a_mapped_command_task(classic):
    done = spawnflow("tasks", "test", "classic", "literal", "--map-index", "1", env=classic)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "XCom return_value: 'two'" in done.stdout.splitlines()
    assert "[stdout] two" in done.stdout
    assert "[stdout] one" not in done.stdout
