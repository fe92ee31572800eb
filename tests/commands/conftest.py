"""Fixtures of the command tests."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from spawnflow.bootstrap import orm
from spawnflow.models import DagModel, DagRun, TaskInstance
from tests.commands.test_cli import run


@pytest.fixture
def project(tmp_path: Path, home: Path) -> dict[str, str]:
    """Environment for a spawnflow with its own Dags folder and migrated SQLite database."""
    dags = tmp_path / "dags"
    dags.mkdir()
    env = {
        "SPAWNFLOW__CORE__DAGS_FOLDER": str(dags),
        "SPAWNFLOW__CORE__LOAD_EXAMPLES": "false",
        "SPAWNFLOW__DAG_PROCESSOR__FILE_PARSING_TIMEOUT": "2",
    }
    assert run("db", "migrate", env=env).exit_code == 0
    return env


STARTED = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


@pytest.fixture
def one_run(migrated_database, database_url) -> dict[str, str]:
    """A paused Dag with one finished run of one task; the environment that finds it."""
    with orm.session_scope(database_url) as session:
        session.add(DagModel(dag_id="listed", fileloc="/dags/listed.py", is_paused=True,
                             schedule="@daily", tags='["a", "b"]'))  # fmt: skip
        session.flush()
        dag_run = DagRun(dag_id="listed", run_id="r1", run_type="manual", state="success",
                         logical_date=STARTED, start_date=STARTED)  # fmt: skip
        session.add(dag_run)
        session.flush()
        ended = STARTED + dt.timedelta(seconds=9)
        session.add(TaskInstance(dag_run_id=dag_run.id, dag_id="listed", task_id="only",
                                 state="failed", try_number=2, start_date=STARTED,
                                 end_date=ended, reason="boom"))  # fmt: skip
    return {"SPAWNFLOW__DATABASE__URL": database_url}
