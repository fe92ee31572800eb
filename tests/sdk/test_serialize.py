"""The serialized Dag document: what the scheduler reads instead of the Dag file."""

from __future__ import annotations

import datetime as dt
import runpy
from pathlib import Path

import msgspec
import pytest

import spawnflow.example_dags
from spawnflow.sdk import building, dags, serialize
from spawnflow.sdk.partitions import Custom

EXAMPLES = Path(spawnflow.example_dags.__file__).parent


def build(name: str) -> dags.Dag:
    building.forget_built_dags()
    runpy.run_path(str(EXAMPLES / f"{name}.py"))
    (built,) = building.built_dags()
    return built


def test_round_trip_keeps_everything_the_scheduler_needs():
    serialized = serialize.serialize(build("example_etl"))
    document = serialize.DagDocument(version=serialize.VERSION, dag=serialized, file_hash="abc")
    again = serialize.decode(serialize.encode(document))
    assert again == document
    assert again.dag.schedule.cron == "0 0 * * *"
    assert again.dag.start_date == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert [t.task_id for t in again.dag.tasks] == ["extract", "transform", "load"]
    assert again.dag.task("extract").retries == 2
    assert again.dag.task("load").upstream == ["transform"]


def test_every_example_dag_serializes():
    for name in ("example_etl", "example_command", "example_fan_out_in"):
        document = serialize.serialize(build(name))
        assert document.fileloc == str(EXAMPLES / f"{name}.py")
    fan = serialize.serialize(build("example_fan_out_in"))
    assert fan.task("combine").upstream == [f"process_shard_{n}" for n in range(4)]
    assert fan.task("clean_up").trigger_rule == "all_done"


def test_an_unknown_version_is_refused_not_guessed():
    raw = msgspec.json.decode(
        serialize.encode(
            serialize.DagDocument(
                version=1, dag=serialize.serialize(build("example_etl")), file_hash=""
            )
        )
    )
    raw["version"] = 99
    with pytest.raises(ValueError, match="serialized Dag version 99 is not 1"):
        serialize.decode(msgspec.json.encode(raw))


def test_the_hash_changes_with_the_dag_and_only_with_it():
    first = serialize.dag_hash(serialize.serialize(build("example_etl")))
    assert serialize.dag_hash(serialize.serialize(build("example_etl"))) == first
    assert serialize.dag_hash(serialize.serialize(build("example_command"))) != first


def load_readme_example(after: str, tmp_path: Path):
    """The Dags of the README's first Python example after ``after``, and the error."""
    from spawnflow.processors.dag_processor.parser import load_dags

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index(after) :]
    code = section[section.index("```python\n") + 10 : section.index("```\n", 10)]
    path = tmp_path / "readme_example.py"
    path.write_text(code)
    return load_dags(str(path))


def test_the_readme_example_dag_loads(tmp_path):
    found, error = load_readme_example("## Writing Dags", tmp_path)

    assert error is None
    (orders,) = found
    assert [t.task_id for t in orders.tasks] == ["extract", "total", "report", "done"]
    assert orders.task("total").upstream == ["extract"]
    assert orders.task("done").trigger_rule == "all_done"


def test_the_readme_asset_example_loads(tmp_path):
    found, error = load_readme_example("**Scheduling on data.**", tmp_path)

    assert error is None
    load_orders, revenue = found
    assert load_orders.task("load").outlets == ["s3://shop/orders"]
    assert revenue.schedule.kind == "assets"
    assert revenue.schedule.describe() == "assets: s3://shop/orders & s3://shop/prices"
    assert [(ref.uri, ref.name) for ref in revenue.assets] == [
        ("s3://shop/orders", "s3://shop/orders"),
        ("s3://shop/prices", "prices"),
    ]


def test_the_readme_custom_mapper_example_loads(tmp_path):
    found, error = load_readme_example("A mapper of your own", tmp_path)

    assert error is None
    [daily_sales] = found
    assert daily_sales.schedule.partition_mappers == {
        "s3://sales/by-region": Custom(name="RegionDay")
    }


def test_the_readme_deferral_example_loads(tmp_path):
    found, error = load_readme_example("## Deferrable tasks, the triggerer", tmp_path)

    assert error is None
    [waits] = found
    assert [t.task_id for t in waits.tasks] == ["poll_later", "orders"]
    assert waits.task("orders").arguments["deferrable"] is True
