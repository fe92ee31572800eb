"""``spawnflow dags check`` runs each task under each start method (issue 15): a task
that works only under fork is caught, a Dag that differs says what differs, and a
check of one method says there was nothing to compare."""

from __future__ import annotations

import pytest

from spawnflow.bootstrap import platform as platforms
from tests.commands.test_cli import run
from tests.processors import dagfiles

pytestmark = pytest.mark.process

needs_fork = pytest.mark.skipif(
    "fork" not in platforms.current().start_methods, reason="no fork on this OS"
)

LAMBDA_IN_A_PROCESS = """
import multiprocessing

from spawnflow import Dag, task

square = lambda x: x * x  # a child under spawn gets it pickled, which a lambda cannot be


@task
def starts_a_process():
    child = multiprocessing.Process(target=square, args=(3,))
    child.start()
    child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"the child exited with {child.exitcode}")


with Dag("lambda_in_a_process"):
    starts_a_process()
"""

IMPORT_ORDER = """
import sys

from spawnflow import CommandTask, Dag

# What a forked parser inherited from its parent decides the tasks.
inherited = "inherited" if "sqlalchemy" in sys.modules else "fresh"
with Dag("import_order"):
    CommandTask(f"task_{inherited}", "exit 0")
"""


@needs_fork
def test_a_task_that_works_only_under_fork_is_caught(project, tmp_path):
    path = dagfiles.write(tmp_path, "lambda_in_a_process.py", LAMBDA_IN_A_PROCESS)
    others = [m for m in platforms.current().start_methods if m != "fork"]

    result = run("dags", "check", str(path), env=project)

    assert result.exit_code == 1, result.output
    rows = {line.split()[1]: line.split()[2:] for line in result.stdout.splitlines()
            if line.startswith("lambda_in_a_process")}  # fmt: skip
    assert rows == {"starts_a_process": ["success", *["failed"] * len(others)]}
    (difference,) = [line for line in result.stderr.splitlines() if "Difference" in line]
    assert (
        f"task 'starts_a_process' of Dag 'lambda_in_a_process' succeeds under fork but not "
        f"under {', '.join(others)}: _pickle.PicklingError: Can't pickle <function <lambda>"
    ) in difference
    assert "likely cause: something the task hands to a child process" in difference


@needs_fork
def test_a_dag_that_differs_between_methods_says_what_differs(project, tmp_path):
    path = dagfiles.write(tmp_path, "import_order.py", IMPORT_ORDER)
    others = [m for m in platforms.current().start_methods if m != "fork"]

    result = run("dags", "check", str(path), "--parse-only", env=project)

    assert result.exit_code == 1, result.output
    tasks = " vs ".join(["fork: task_inherited", *(f"{m}: task_fresh" for m in others)])
    assert (
        f"Difference: Dag 'import_order' differs between start methods: tasks ({tasks}) "
        "(likely cause: the file depends on what was imported before it"
    ) in result.stderr


@pytest.mark.parametrize("method", platforms.current().start_methods)
def test_upstream_values_reach_each_task_and_one_method_is_not_a_comparison(
    project,
    tmp_path,
    method,
):
    path = dagfiles.write(tmp_path, "passes_a_value.py", dagfiles.PASSES_A_VALUE)

    result = run("dags", "check", str(path), "--method", method, env=project)

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        f"Checked under {method} only (parsed, and 2 task(s) ran): no other start method "
        "to compare with."
    )


def test_a_task_that_fails_everywhere_fails_the_check(project, tmp_path):
    failing = dagfiles.PASSES_A_VALUE.replace('return {"rows": 5}', 'return {"rows": 4}')
    path = dagfiles.write(tmp_path, "fails.py", failing)

    result = run("dags", "check", str(path), env=project)

    assert result.exit_code == 1, result.output
    assert (
        "Task 'consume' of Dag 'passes_a_value' fails under every start method: "
        "ValueError: got {'rows': 4}."
    ) in result.stderr
    assert "Difference" not in result.stderr
