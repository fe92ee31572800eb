"""Tests of assets, asset-triggered and partition-driven runs."""

from __future__ import annotations

from pathlib import Path


def parsed_project(make_settings, tmp_path: Path, database_url: str, start_method: str,
                   dag_file: str, text: str):  # fmt: skip
    """Settings over one Dag file (``text``, formatted with ``marks``), parsed into a
    fresh database: (settings, marks folder, environment for the CLI)."""
    from spawnflow.models import schema
    from spawnflow.processors.dag_processor.manager import DagFileProcessorManager

    marks, dags = tmp_path / "marks", tmp_path / "dags"
    marks.mkdir()
    dags.mkdir()
    (dags / dag_file).write_text(text.replace("{marks}", str(marks)))
    values = {
        "database.url": database_url, "core.dags_folder": str(dags),
        "core.load_examples": "false", "core.mp_start_method": start_method,
        "executor.parallelism": "2", "executor.heartbeat_interval": "0.2",
        "scheduler.loop_interval": "0.1",
    }  # fmt: skip
    settings = make_settings(**values)
    schema.reset(database_url)
    summary = DagFileProcessorManager(settings).run(once=True)[0]
    assert summary.errors == {}, summary.errors
    env = {"SPAWNFLOW__" + k.upper().replace(".", "__"): v for k, v in values.items()}
    return settings, marks, env


def count(table) -> int:
    """Rows in ``table`` now."""
    from sqlalchemy import func, select

    from spawnflow.bootstrap import orm

    with orm.session_scope() as session:
        return session.scalar(select(func.count()).select_from(table)) or 0


def partition_runs(dag_id: str) -> list[tuple[str | None, str]]:
    """(partition key, state) of each run of ``dag_id``, sorted."""
    from sqlalchemy import select

    from spawnflow.bootstrap import orm
    from spawnflow.models.run import DagRun

    with orm.session_scope() as session:
        found = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id))
        return sorted((run.partition_key, run.state) for run in found)
