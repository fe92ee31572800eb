"""Asset watchers on the triggerer, under each start method, on SQLite and PostgreSQL:
their events schedule the Dags that consume the asset, and what they remember in the
asset's state store outlives a triggerer."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.models.assets import AssetEvent, AssetModel
from spawnflow.models.run import DagRun
from tests.triggerer.harness import marks_of, start_triggerer, trigger_rows
from tests.triggerer.test_deferral import schedule_until, set_up

pytestmark = pytest.mark.process


@pytest.fixture
def watching(start_method, make_settings, tmp_path, deferral_url):
    return set_up(start_method, make_settings, tmp_path, deferral_url)


def consumer_runs() -> list[DagRun]:
    with orm.session_scope(write=False) as session:
        query = select(DagRun).where(DagRun.dag_id == "consumes_the_drops").order_by(DagRun.id)
        return list(session.scalars(query))


def finished_consumer_runs() -> int:
    return sum(run.state in ("success", "failed") for run in consumer_runs())


def watched_events() -> list[dict]:
    with orm.session_scope(write=False) as session:
        rows = session.scalars(
            select(AssetEvent.extra).join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.uri == "file://watched").order_by(AssetEvent.id)
        )  # fmt: skip
        return [json.loads(extra) for extra in rows]


def consumed(marks) -> list[list[str]]:
    return [json.loads(line.split(" ", 1)[1]) for line in marks_of(marks, "consumed")]


def test_a_watchers_events_schedule_the_consumer_and_its_memory_outlives_the_triggerer(
    watching,
):
    settings, gates, marks = watching
    (watcher,) = trigger_rows(watchers=True)
    assert (watcher.watcher_name, watcher.classpath) == (
        "drops", "spawnflow.sdk.triggers.FileTrigger"
    )  # fmt: skip
    first = start_triggerer(settings)
    try:
        (gates / "drops" / "a.csv").write_text("1")
        schedule_until(settings, None, lambda: finished_consumer_runs() == 1)
    finally:
        first.stop(grace=5)  # warm: the watcher is handed back

    second = start_triggerer(settings)
    try:
        # The new watcher remembers a.csv (the asset's state store): only b.csv is news.
        (gates / "drops" / "b.csv").write_text("2")
        schedule_until(settings, None, lambda: finished_consumer_runs() == 2)
    finally:
        second.stop(grace=5)

    assert [run.state for run in consumer_runs()] == ["success", "success"]
    assert [run.run_type for run in consumer_runs()] == ["asset_triggered"] * 2
    assert consumed(marks) == [["a.csv"], ["b.csv"]]
    events = watched_events()
    assert [event["path"].rsplit("/", 1)[-1] for event in events] == ["a.csv", "b.csv"]
    assert {event["watcher"] for event in events} == {"drops"}
