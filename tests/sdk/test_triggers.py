"""Triggers, deferrals, asset watchers and sensors as Dag authors build them (no process)."""

from __future__ import annotations

import asyncio
import datetime as dt
import pickle

import pytest

from spawnflow import (
    Asset,
    AssetWatcher,
    BaseTrigger,
    Dag,
    DagDefinitionError,
    DateTimeSensorAsync,
    DateTimeTrigger,
    FileSensor,
    FileTrigger,
    TaskDeferred,
    TimeDeltaTrigger,
    TriggerEvent,
)
from spawnflow.sdk import serialize
from spawnflow.sdk.triggers import load_trigger


def first_event(trigger: BaseTrigger) -> TriggerEvent:
    async def take():
        stream = trigger.run()
        try:
            return await asyncio.wait_for(anext(stream), timeout=60)
        finally:
            await stream.aclose()

    return asyncio.run(take())


@pytest.mark.parametrize("trigger", [
    DateTimeTrigger(dt.datetime(2026, 12, 1, 6, 0)),
    TimeDeltaTrigger(dt.timedelta(minutes=5)),
    FileTrigger("s3://bucket/in/*.csv", poll_interval=2.5),
])  # fmt: skip
def test_built_in_triggers_are_rebuilt_from_what_they_serialize(trigger):
    classpath, kwargs = trigger.serialize()
    again = load_trigger(classpath, kwargs)
    assert type(again).__name__ == type(trigger).__name__
    assert again.serialize() == (classpath, kwargs)


def test_a_naive_moment_is_utc_and_a_time_delta_is_counted_from_when_it_is_made():
    assert DateTimeTrigger(dt.datetime(2026, 1, 1)).moment.tzinfo is dt.UTC
    before = dt.datetime.now(dt.UTC)
    moment = TimeDeltaTrigger(60).moment
    assert (
        before + dt.timedelta(seconds=60)
        <= moment
        <= dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    )


def test_a_moment_in_the_past_fires_at_once():
    past = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    assert first_event(DateTimeTrigger(past)).payload == {"moment": past.isoformat()}


def test_a_file_trigger_fires_for_a_file_matching_its_pattern(tmp_path):
    (tmp_path / "orders-1.csv").write_text("x")
    (tmp_path / "notes.txt").write_text("x")
    event = first_event(FileTrigger(str(tmp_path / "*.csv"), poll_interval=0.05))
    assert event.payload == {"path": (tmp_path / "orders-1.csv").as_posix()}
    url_event = first_event(FileTrigger((tmp_path / "notes.txt").as_uri(), poll_interval=0.05))
    assert url_event.payload == {"path": (tmp_path / "notes.txt").as_uri()}


def test_a_trigger_class_that_cannot_be_found_says_which(tmp_path):
    with pytest.raises(ImportError, match=r"cannot import trigger class 'nowhere\.Nothing'"):
        load_trigger("nowhere.Nothing", {})
    with pytest.raises(TypeError, match="is not a trigger class"):
        load_trigger("datetime.datetime", {})


@pytest.mark.parametrize(("arguments", "problem"), [
    ({"trigger": "soon", "method_name": "go"}, "needs a trigger"),
    ({"trigger": TimeDeltaTrigger(1), "method_name": "not a name"}, "must name a function"),
    ({"trigger": TimeDeltaTrigger(1), "method_name": "go", "timeout": 0}, "positive number"),
])  # fmt: skip
def test_a_deferral_that_cannot_work_says_why(arguments, problem):
    with pytest.raises((TypeError, ValueError), match=problem):
        TaskDeferred(**arguments)


def test_a_deferral_keeps_its_timeout_in_seconds_and_passes_every_except_exception():
    deferred = TaskDeferred(trigger=TimeDeltaTrigger(1), method_name="go",
                            timeout=dt.timedelta(minutes=2))  # fmt: skip
    assert deferred.timeout == 120.0
    assert not isinstance(deferred, Exception)  # a task's `except Exception` lets it through


def test_asset_watchers_serialize_with_the_asset():
    watcher = AssetWatcher("drops", FileTrigger("/in/*.csv", poll_interval=1))
    watched = Asset("file:///in", watchers=[watcher])
    assert pickle.loads(pickle.dumps(watched)).watchers[0].name == "drops"
    with Dag("consumer", schedule=watched) as consumer:
        pass
    (ref,) = serialize.serialize(consumer).assets
    (stored,) = ref.watchers
    assert (stored.name, stored.classpath) == ("drops", "spawnflow.sdk.triggers.FileTrigger")
    assert load_trigger(stored.classpath, __import__("json").loads(stored.kwargs)).filepath == (
        "/in/*.csv"
    )


@pytest.mark.parametrize(("watchers", "problem"), [
    (["not a watcher"], "must be AssetWatchers"),
    ([AssetWatcher("w", TimeDeltaTrigger(1)), AssetWatcher("w", TimeDeltaTrigger(2))],
     "two watchers named 'w'"),
])  # fmt: skip
def test_bad_watchers_name_what_is_wrong(watchers, problem):
    with pytest.raises(ValueError, match=problem):
        Asset("s3://b/k", watchers=watchers)


class LocalTrigger(BaseTrigger):
    def serialize(self):
        return "spawnflow_dagfile_0123456789ab.LocalTrigger", {}

    async def run(self):
        yield TriggerEvent()


def test_a_watcher_whose_trigger_lives_in_the_dag_file_is_a_definition_error():
    watched = Asset("s3://b/k", watchers=[AssetWatcher("local", LocalTrigger())])
    with Dag("consumer", schedule=watched) as consumer:
        pass
    with pytest.raises(DagDefinitionError, match="defined in the Dag file"):
        serialize.serialize(consumer)


def test_sensors_check_their_arguments_and_poke(tmp_path):
    with Dag("sensing"):
        sensor = FileSensor("wait", filepath=str(tmp_path / "x"), poke_interval=0.1)
        with pytest.raises(DagDefinitionError, match="poke_interval 0 must be a positive"):
            FileSensor("bad", filepath="x", poke_interval=0)
        with pytest.raises(DagDefinitionError, match="target_time"):
            DateTimeSensorAsync("bad_time", target_time="not a time")
    assert sensor.poke({}) is False
    (tmp_path / "x").write_text("")
    assert sensor.poke({}) is True
    assert sensor.execute({}) is None  # there already: no deferral
