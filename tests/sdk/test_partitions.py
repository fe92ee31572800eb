"""Partition mappers, and Dags made partition-driven with them."""

from __future__ import annotations

import datetime as dt
import re
from zoneinfo import ZoneInfo

import msgspec
import pytest

from spawnflow import (
    Asset,
    CustomMapper,
    Dag,
    DagDefinitionError,
    DayToMonth,
    DayToWeek,
    HourToDay,
    Identity,
)
from spawnflow.processors.dag_processor.messages import MapPartition, PartitionMapped
from spawnflow.processors.dag_processor.parser import map_partitions
from spawnflow.sdk import serialize
from spawnflow.sdk.partitions import Custom, Mapper


class RegionDay(CustomMapper):
    """``eu/2026-11-30`` counts for the run of ``2026-11-30``."""

    def target(self, key: str) -> str:
        _region, day = key.split("/")
        return day


class Numbered(CustomMapper):
    def target(self, key: str) -> str:
        return 7  # type: ignore[return-value]  # the mistake this test is about


PARIS = ZoneInfo("Europe/Paris")


def test_hours_roll_up_into_the_dags_local_day():
    assert HourToDay().target("2026-11-30T22", dt.UTC) == "2026-11-30"
    assert HourToDay().target("2026-11-30T23", PARIS) == "2026-12-01"  # 00:00 in Paris
    day = HourToDay().needed("2026-12-01", PARIS)
    assert (len(day), day[0], day[-1]) == (24, "2026-11-30T23", "2026-12-01T22")
    assert len(HourToDay().needed("2026-03-29", PARIS)) == 23  # spring forward
    assert len(HourToDay().needed("2026-10-25", PARIS)) == 25  # fall back


def test_days_roll_up_into_iso_weeks_and_months():
    assert DayToWeek().target("2026-12-01", dt.UTC) == "2026-W49"
    assert DayToWeek().needed("2026-W49", dt.UTC) == [f"2026-{d}" for d in (
        "11-30", "12-01", "12-02", "12-03", "12-04", "12-05", "12-06")]  # fmt: skip
    assert DayToMonth().target("2026-02-14", dt.UTC) == "2026-02"
    assert len(DayToMonth().needed("2026-02", dt.UTC)) == 28
    assert len(DayToMonth().needed("2028-02", dt.UTC)) == 29
    assert Identity().target("any key", dt.UTC) == "any key"
    assert Identity().needed("any key", dt.UTC) is None


@pytest.mark.parametrize(
    ("mapper", "key", "message"),
    [
        (HourToDay(), "2026-11-30", "is not an hour (YYYY-MM-DDTHH, UTC)"),
        (DayToWeek(), "30/11/2026", "is not a day (YYYY-MM-DD)"),
        (DayToMonth(), "2026-13-01", "is not a day (YYYY-MM-DD)"),
    ],
)
def test_a_key_a_mapper_cannot_read_is_named(mapper, key, message):
    with pytest.raises(ValueError, match=re.escape(f"partition key {key!r} {message}")):
        mapper.target(key, dt.UTC)


def test_mappers_serialise_with_the_dag():
    hourly, prices = Asset("s3://logs/hourly"), Asset("s3://prices")
    with Dag("rollup", schedule=hourly & prices, partition_mappers={hourly: HourToDay()}) as dag:
        pass
    document = serialize.DagDocument(serialize.VERSION, serialize.serialize(dag), "h")
    schedule = serialize.decode(serialize.encode(document)).dag.schedule
    assert schedule.partition_mappers == {
        "s3://logs/hourly": HourToDay(),
        "s3://prices": Identity(),
    }
    assert schedule.describe() == "assets: s3://logs/hourly & s3://prices (partitioned)"
    assert msgspec.json.decode(b'{"kind": "day_to_week"}', type=Mapper) == DayToWeek()


@pytest.mark.parametrize(
    ("schedule", "mappers", "message"),
    [
        ("@daily", {}, "partition_mappers needs a schedule on Assets"),
        (Asset("s3://a"), {Asset("s3://b"): HourToDay()}, "names 's3://b', which the schedule"),
        (Asset("s3://a"), {"s3://a": "hourly"}, "must be Identity(), HourToDay()"),
        (Asset("s3://a"), {"s3://a": RegionDay}, "or an instance of a CustomMapper subclass"),
        (Asset("s3://a"), {"s3://a": Custom(name="x")}, "or an instance of a CustomMapper"),
    ],
)
def test_partition_mappers_that_do_not_fit_the_schedule_are_definition_errors(
    schedule, mappers, message
):
    with pytest.raises(DagDefinitionError, match=re.escape(message)):
        Dag("bad", schedule=schedule, partition_mappers=mappers,
            start_date=dt.datetime(2026, 1, 1))  # fmt: skip


def test_a_custom_mapper_needs_its_one_method():
    class Unfinished(CustomMapper):
        pass

    with pytest.raises(TypeError, match=r"abstract method '?target"):
        Unfinished()  # type: ignore[abstract]


def test_a_custom_mapper_serialises_as_its_class_name_and_the_dag_keeps_the_object():
    sales = Asset("s3://sales")
    mapper = RegionDay()
    with Dag("sales", schedule=sales, partition_mappers={sales: mapper}) as dag:
        pass
    document = serialize.DagDocument(serialize.VERSION, serialize.serialize(dag), "h")
    schedule = serialize.decode(serialize.encode(document)).dag.schedule
    assert schedule.partition_mappers == {"s3://sales": Custom(name=f"{__name__}.RegionDay")}
    assert dag.custom_mappers == {"s3://sales": mapper}


def test_the_parser_maps_with_the_dags_mappers_as_they_are_now():
    sales, hourly, other = Asset("s3://sales"), Asset("s3://hourly"), Asset("s3://other")
    with Dag("sales", schedule=sales & hourly & other,
             partition_mappers={sales: RegionDay(), hourly: HourToDay()}) as dag:  # fmt: skip
        pass
    with Dag("numbered", schedule=sales, partition_mappers={sales: Numbered()}) as numbered:
        pass
    requests = [
        MapPartition(1, "sales", "s3://sales", "eu/2026-11-30"),
        MapPartition(2, "sales", "s3://sales", "no region"),
        MapPartition(3, "sales", "s3://hourly", "2026-11-30T05"),  # now a built-in's
        MapPartition(4, "sales", "s3://gone", "eu/2026-11-30"),
        MapPartition(5, "deleted", "s3://sales", "eu/2026-11-30"),
        MapPartition(6, "numbered", "s3://sales", "eu/2026-11-30"),
    ]
    assert map_partitions([dag, numbered], requests) == [
        PartitionMapped(1, "2026-11-30"),
        PartitionMapped(2, None, "ValueError: not enough values to unpack (expected 2, got 1)"),
        PartitionMapped(3, "2026-11-30"),
        PartitionMapped(4, None, "the Dag no longer maps the asset's partitions"),
        PartitionMapped(5, None, "the Dag is no longer in its file"),
        PartitionMapped(
            6, None, "the mapper returned 7, not a partition key of 1 to 250 characters"
        ),
    ]
