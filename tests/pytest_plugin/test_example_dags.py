"""The example Dags, tested as a user tests theirs: with the plugin's ``spawnflow_env``,
under each start method the suite runs (spawnflow's own tests use the plugin)."""

from __future__ import annotations

from pathlib import Path

import pytest

import spawnflow.example_dags

pytestmark = pytest.mark.process

EXAMPLES = Path(spawnflow.example_dags.__file__).parent


def test_example_etl_totals_each_customer(spawnflow_env):
    spawnflow_env.add_dag_file("example_etl", (EXAMPLES / "example_etl.py").read_text())

    result = spawnflow_env.run_dag("example_etl")

    result.assert_succeeded()
    assert result["transform"].return_value == {"ada": 15.75, "grace": 7.0}
    assert result["load"].return_value == 2
    assert "[stdout] ada: 15.75" in result["load"].log


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("example_*.py")))
def test_every_example_dag_runs_and_parses_alike_under_every_method(spawnflow_env, name):
    path = spawnflow_env.add_dag_file(name, (EXAMPLES / f"{name}.py").read_text())

    spawnflow_env.run_dag(name).assert_succeeded()
    spawnflow_env.check_dag_file(path, parse_only=True)


def test_example_mapping_gives_each_instance_its_result(spawnflow_env):
    spawnflow_env.add_dag_file("example_mapping", (EXAMPLES / "example_mapping.py").read_text())

    result = spawnflow_env.run_dag("example_mapping")

    result.assert_succeeded()
    counted = result["count_rows"]
    assert len(counted) == 3
    assert counted.return_value == [9, 12, 11]  # len(path) - 1 header line
    assert [counted[i].map_index for i in range(3)] == [0, 1, 2]
    assert "task started" in counted[1].log
    assert result["total"].return_value == 32
    assert result["announce"][1].return_value == "customers 2"
