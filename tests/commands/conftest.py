"""Fixtures of the command tests."""

from __future__ import annotations

from pathlib import Path

import pytest

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
