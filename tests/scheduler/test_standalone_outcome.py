"""``standalone --exit-when-idle`` can gate a CI job: it exits non-zero when a run
failed or a Dag file has an import error, and its last line says how many runs ended
which way (issue 15)."""

from __future__ import annotations

import json

import pytest

from spawnflow.comms import ComponentStatus
from spawnflow.services.standalone import all_idle, idle_outcome
from tests.scheduler.test_e2e import environment, query, spawnflow

pytestmark = pytest.mark.process

DAGS = """
import datetime as dt

from spawnflow import Dag, task


@task
def works():
    return 1


@task
def breaks():
    raise ValueError("this task always fails")


with Dag("passes", schedule="@daily", start_date=dt.datetime(2026, 1, 1)):
    works()

with Dag("fails", schedule="@daily", start_date=dt.datetime(2026, 1, 1)):
    breaks()
"""


def test_a_failed_run_and_an_import_error_make_standalone_exit_non_zero(
    start_method, home, tmp_path
):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "two_dags.py").write_text(DAGS)
    (dags / "broken.py").write_text("import a_module_that_does_not_exist\n")
    url = f"sqlite:///{(tmp_path / 'standalone.db').as_posix()}"
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false")

    done = spawnflow("standalone", "--exit-when-idle", env=env)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.splitlines()[-1] == (
        "Done: every due Dag run has finished: 1 succeeded, 1 failed; 1 Dag file has an "
        "import error (spawnflow dags list-import-errors)."
    )
    assert dict(query(url, "SELECT dag_id, state FROM dag_run")) == {
        "passes": "success", "fails": "failed"
    }  # fmt: skip
    # The scheduler said what it did, each end at a level that matches it.
    lines = (home / "logs" / "scheduler.log").read_text().splitlines()
    said = [json.loads(line) for line in lines]
    ends = {(e["event"], e.get("dag_id"), e.get("state"), e["level"]) for e in said
            if e["event"] in ("run finished", "task finished")}  # fmt: skip
    assert ends == {
        ("task finished", "passes", "success", "info"),
        ("task finished", "fails", "failed", "error"),
        ("run finished", "passes", "success", "info"),
        ("run finished", "fails", "failed", "error"),
    }
    assert {e["task_id"] for e in said if e["event"] == "task queued"} == {"works", "breaks"}
    assert all(e["seconds"] > 0 for e in said if e["event"].endswith("finished"))


def _status(role: str, **fields: int | bool) -> ComponentStatus:
    return ComponentStatus(**{"role": role, "loops": 3, "idle": True, "text": "", **fields})


@pytest.mark.parametrize(
    ("failed", "errors", "code", "reason"),
    [
        (0, 0, 0, "every due Dag run has finished: 2 succeeded, 0 failed"),
        (1, 0, 1, "every due Dag run has finished: 2 succeeded, 1 failed"),
        (0, 2, 1, "every due Dag run has finished: 2 succeeded, 0 failed; 2 Dag files have "
                  "an import error (spawnflow dags list-import-errors)"),
    ],
)  # fmt: skip
def test_the_idle_outcome_counts_runs_and_import_errors(failed, errors, code, reason):
    outcome = idle_outcome({
        "scheduler": _status("scheduler", succeeded_runs=2, failed_runs=failed),
        "dag-processor": _status("dag-processor", import_errors=errors),
    })  # fmt: skip
    assert (outcome.exit_code, outcome.reason) == (code, reason)


def test_standalone_is_not_idle_while_a_component_is_still_starting():
    """The runs can end before a slow machine has the triggerer up: ``--exit-when-idle``
    waits for its first status rather than stop it in the middle of its start (CI saw
    the live view end on "triggerer: starting")."""
    statuses = {
        "dag-processor": _status("dag-processor"),
        "scheduler": _status("scheduler", loops=5, idle=True),
    }
    assert not all_idle(statuses, idle_after=3)
    statuses["triggerer"] = _status("triggerer")
    assert all_idle(statuses, idle_after=3)
    assert not all_idle(statuses, idle_after=5)  # the scheduler's loop after the first pass
    statuses["scheduler"] = _status("scheduler", loops=6, idle=False)
    assert not all_idle(statuses, idle_after=3)
