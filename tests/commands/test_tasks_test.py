"""``spawnflow tasks test`` with upstream XComs: given with ``--xcom``, a warning when
one was read as None, ``--strict`` failing the task instead (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.commands.test_cli import run
from tests.processors import dagfiles

pytestmark = pytest.mark.process


@pytest.fixture
def pulls(project):
    dagfiles.write(
        Path(project["SPAWNFLOW__CORE__DAGS_FOLDER"]), "pulls.py", dagfiles.PASSES_A_VALUE
    )
    return project


def test_an_upstream_xcom_nobody_gave_reads_as_none_with_a_warning(pulls):
    result = run("tasks", "test", "passes_a_value", "consume", env=pulls)

    assert result.exit_code == 1, result.output  # it checks the value it got
    assert "Task 'consume': failed (ValueError: got None)" in result.stdout
    assert (
        "Warning: the task read upstream XComs nobody gave as None: produce.return_value "
        "(give them with --xcom TASK[.KEY]=JSON, or fail with --strict)."
    ) in result.stderr


def test_strict_fails_the_task_that_pulls_a_missing_xcom(pulls):
    result = run("tasks", "test", "passes_a_value", "consume", "--strict", env=pulls)

    assert result.exit_code == 1, result.output
    assert (
        "Task 'consume': failed (no upstream XCom produce.return_value in this test; give it "
        "with --xcom)"
    ) in result.stdout
    assert "Warning" not in result.stderr


def test_an_upstream_xcom_given_reaches_the_task(pulls):
    result = run("tasks", "test", "passes_a_value", "consume", "--strict",
                 "--xcom", 'produce={"rows": 5}', env=pulls)  # fmt: skip

    assert result.exit_code == 0, result.output
    assert "Task 'consume': success" in result.stdout


def test_an_xcom_that_is_not_json_is_a_usage_error(pulls):
    result = run("tasks", "test", "passes_a_value", "consume", "--xcom", "produce={rows", env=pulls)

    assert result.exit_code == 2
    assert "Invalid value for --xcom: the value of 'produce' is not JSON" in result.stderr
    assert "Traceback" not in result.output
