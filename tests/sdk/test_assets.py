"""Assets: validation, conditions, Asset schedules, task outlets and their serialized form."""

from __future__ import annotations

import copy
import datetime as dt
import pickle

import msgspec
import pytest

import spawnflow
from spawnflow import Asset, CommandTask, Dag, DagDefinitionError, dag, task
from spawnflow.sdk import schedule, serialize
from spawnflow.sdk.assets import AssetAll, AssetAny, AssetCondition, AssetRef, condition_of

HERE = __file__
A, B, C = Asset("s3://bucket/a"), Asset("s3://bucket/b"), Asset("s3://bucket/c")


def one(uri: str) -> AssetCondition:
    return AssetCondition("asset", uri=uri)


# -- Asset ----------------------------------------------------------------------------


def test_an_asset_has_a_uri_a_name_and_a_group():
    plain = Asset("file:///data/orders.csv")
    named = Asset("s3://bucket/x", name="orders", group="sales")
    assert (plain.uri, plain.name, plain.group) == ("file:///data/orders.csv",) * 2 + ("asset",)
    assert (named.uri, named.name, named.group) == ("s3://bucket/x", "orders", "sales")
    assert repr(plain) == "Asset('file:///data/orders.csv')"
    assert repr(named) == "Asset('s3://bucket/x', name='orders', group='sales')"
    assert spawnflow.Asset is Asset
    assert "Asset" in spawnflow.sdk.__all__


def test_assets_are_equal_and_hashed_by_uri_only():
    assert Asset("s3://a", name="one") == Asset("s3://a", name="two", group="g")
    assert Asset("s3://a") != Asset("s3://b")
    assert Asset("s3://a") != "s3://a"
    assert len({Asset("s3://a", name="one"), Asset("s3://a"), Asset("s3://b")}) == 2


def test_assets_cannot_be_changed_but_pickle_and_copy():
    with pytest.raises(AttributeError, match="cannot be changed"):
        A.uri = "s3://other"  # type: ignore[misc]
    named = Asset("s3://a", name="n", group="g")
    for again in (pickle.loads(pickle.dumps(named)), copy.deepcopy(named)):
        assert (again.uri, again.name, again.group) == ("s3://a", "n", "g")
    both = A & (B | C)
    assert pickle.loads(pickle.dumps(both)) == both


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (dict(uri=5), "asset uri 5 must be a string"),
        (dict(uri=""), "asset uri '' must be 1-1500 characters long, not 0"),
        (dict(uri="s3://" + "x" * 1500), "must be 1-1500 characters long, not 1505"),
        (dict(uri="s3://my bucket"), "asset uri 's3://my bucket' must not contain whitespace"),
        (dict(uri="s3://a\x00b"), "must not contain whitespace or control characters"),
        (dict(uri="s3://a\tb"), "must not contain whitespace or control characters"),
        (dict(uri="orders.csv"), "asset uri 'orders.csv' must look like 'scheme://path'"),
        (dict(uri="s3://"), "asset uri 's3://' must look like 'scheme://path'"),
        (dict(uri="3s://x"), "asset uri '3s://x' must look like 'scheme://path'"),
        (dict(uri="s_3://x"), "asset uri 's_3://x' must look like 'scheme://path'"),
        (dict(uri="s3://a", name=""), "asset name '' must be a non-empty string of at most 1500"),
        (dict(uri="s3://a", name="n" * 1501), "must be a non-empty string of at most 1500"),
        (dict(uri="s3://a", name=3), "asset name 3 must be a non-empty string"),
        (dict(uri="s3://a", group=""), "asset group '' must be a non-empty string of at most 250"),
        (dict(uri="s3://a", group="g" * 251), "asset group 'ggg"),
    ],
)  # fmt: skip
def test_bad_assets_name_what_is_wrong(arguments, problem):
    with pytest.raises(ValueError, match=r"^asset ") as raised:
        Asset(**arguments)
    assert problem in str(raised.value)
    assert len(str(raised.value)) < 200  # a long value is cut short


def test_good_uris_and_limits():
    for uri in ("s3://b/k", "a+b.c-d://x", "file:///tmp/x", "x://" + "y" * 1496):
        assert Asset(uri).uri == uri
    assert Asset("s3://a", name="n" * 1500, group="g" * 250).group == "g" * 250


# -- conditions -----------------------------------------------------------------------


def test_and_and_or_build_flat_conditions():
    assert (A & B).items == (A, B)
    assert ((A & B) & C).items == (A, B, C)
    assert (A & (B & C)).items == (A, B, C)
    assert ((A | B) | C).items == (A, B, C)
    mixed = A & (B | C)
    assert isinstance(mixed, AssetAll)
    assert mixed.items == (A, AssetAny(B, C))
    assert isinstance((A & B) | C, AssetAny)
    assert ((A & B) | C).items == (AssetAll(A, B), C)
    assert repr(A | B) == "AssetAny(Asset('s3://bucket/a'), Asset('s3://bucket/b'))"


@pytest.mark.parametrize("other", ["s3://x", 1, None, [A]])
def test_and_or_with_anything_else_is_a_type_error(other):
    for combined in (A, A & B, A | B):
        with pytest.raises(TypeError):
            combined & other  # type: ignore[operator]
        with pytest.raises(TypeError):
            combined | other  # type: ignore[operator]


def test_condition_of_turns_assets_and_lists_into_conditions():
    assert condition_of(A) == one(A.uri)
    assert condition_of([A, B]) == AssetCondition("all", items=[one(A.uri), one(B.uri)])
    assert condition_of((A,)) == one(A.uri)
    assert condition_of([A & B, C]) == condition_of(A & B & C)
    assert condition_of(A | (B & C)) == AssetCondition(
        "any", items=[one(A.uri), AssetCondition("all", items=[one(B.uri), one(C.uri)])]
    )


@pytest.mark.parametrize("value", [[], (), "s3://a", None, [A, "s3://b"], {A}, 3])
def test_condition_of_anything_else_says_what_is_allowed(value):
    with pytest.raises(ValueError, match=r"must be an Asset, Assets combined with & or \|"):
        condition_of(value)


def test_evaluate_and_describe():
    condition = condition_of(A & (B | C))
    assert condition.describe() == "s3://bucket/a & (s3://bucket/b | s3://bucket/c)"
    assert condition.uris() == ["s3://bucket/a", "s3://bucket/b", "s3://bucket/c"]
    assert not condition.evaluate(set())
    assert not condition.evaluate({A.uri})
    assert not condition.evaluate({B.uri, C.uri})
    assert condition.evaluate({A.uri, C.uri})
    assert condition.evaluate(frozenset({A.uri, B.uri, "s3://other"}))
    either = condition_of((A & B) | C)
    assert either.describe() == "(s3://bucket/a & s3://bucket/b) | s3://bucket/c"
    assert either.evaluate({C.uri})
    assert not either.evaluate({A.uri})
    assert condition_of(A).describe() == "s3://bucket/a"
    assert condition_of(A).evaluate({A.uri})
    assert condition_of(A | A).uris() == [A.uri]


def test_conditions_decode_only_when_consistent():
    data = msgspec.json.encode(condition_of(A & (B | C)))
    assert msgspec.json.decode(data, type=AssetCondition) == condition_of(A & (B | C))
    for bad in (b'{"kind": "asset"}', b'{"kind": "all", "items": []}', b'{"kind": "some"}'):
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(bad, type=AssetCondition)


# -- schedules ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (A, "assets: s3://bucket/a"),
        ([A, B], "assets: s3://bucket/a & s3://bucket/b"),
        ((A,), "assets: s3://bucket/a"),
        (A | B, "assets: s3://bucket/a | s3://bucket/b"),
        ([A | B, C], "assets: (s3://bucket/a | s3://bucket/b) & s3://bucket/c"),
    ],
)
def test_asset_schedules(value, shown):
    parsed = schedule.parse(value)
    assert parsed.kind == "assets"
    assert parsed.assets == condition_of(value)
    assert parsed.describe() == shown


@pytest.mark.parametrize("value", [[], (), [A, "@daily"], ["s3://a"], 5])
def test_other_schedules_say_what_is_allowed(value):
    with pytest.raises(ValueError, match="a non-empty list of Assets") as raised:
        schedule.parse(value)
    assert str(raised.value).startswith(f"schedule {value!r} must be a cron expression")


def test_a_dag_scheduled_on_assets_needs_no_start_date():
    built = Dag("on_assets", schedule=A & B)
    assert built.start_date is None
    assert built.schedule.kind == "assets"
    assert built.schedule_assets == [A, B]
    with pytest.raises(DagDefinitionError, match="a non-empty list of Assets"):
        Dag("empty", schedule=[])


# -- outlets --------------------------------------------------------------------------


def test_tasks_take_outlets_from_every_way_of_creating_them():
    named = Asset("s3://bucket/a", name="first")

    @dag(schedule=None)
    def producing():
        @task(outlets=[A, B, named])
        def extract() -> int:
            return 1

        @task(retries=2)
        def plain(value: int) -> int:
            return value

        @task.command(outlets=(C,))
        def show(value: int) -> str:
            return f"echo {value}"

        show(plain(extract()))
        CommandTask("direct", "true", outlets=[C])

    built = producing()
    assert built.get_task("extract").outlets == [A, B]
    assert built.get_task("extract").outlets[0].name == A.name  # the first one is kept
    assert built.get_task("plain").outlets == []
    assert built.get_task("plain").retries == 2
    assert built.get_task("show").outlets == [C]
    assert built.get_task("direct").outlets == [C]


@pytest.mark.parametrize(
    ("outlets", "problem"),
    [
        (["s3://bucket/a"], "outlets must be Assets, not str 's3://bucket/a'"),
        ([A, A & B], "outlets must be Assets, not AssetAll"),
        (A, "outlets Asset('s3://bucket/a') must be a list of Assets"),
    ],
)
def test_outlets_that_are_not_assets_name_the_task(outlets, problem):
    @task(outlets=outlets)
    def produce() -> None:
        pass

    with pytest.raises(DagDefinitionError) as raised, Dag("outlets"):
        produce()
    assert str(raised.value).startswith(f"{HERE}: Dag 'outlets': task 'produce': ")
    assert problem in str(raised.value)


# -- serialization --------------------------------------------------------------------


def round_trip(built: Dag) -> serialize.DagDocument:
    document = serialize.DagDocument(
        version=serialize.VERSION, dag=serialize.serialize(built), file_hash=""
    )
    again = serialize.decode(serialize.encode(document))
    assert again == document
    return again


def test_assets_survive_serialization():
    orders = Asset("s3://bucket/b", name="orders", group="sales")
    with Dag("consumer", schedule=A & (orders | C)) as built:

        @task(outlets=[Asset("s3://bucket/z", group="out"), A])
        def report() -> None:
            pass

        report()
        CommandTask("other", "true", outlets=[C])

    again = round_trip(built).dag
    assert again.schedule.kind == "assets"
    assert again.schedule.assets == condition_of(A & (B | C))
    assert again.schedule.describe() == "assets: s3://bucket/a & (s3://bucket/b | s3://bucket/c)"
    assert again.task("report").outlets == ["s3://bucket/z", "s3://bucket/a"]
    assert again.task("other").outlets == ["s3://bucket/c"]
    assert again.assets == [
        AssetRef("s3://bucket/a", "s3://bucket/a", "asset"),
        AssetRef("s3://bucket/b", "orders", "sales"),
        AssetRef("s3://bucket/c", "s3://bucket/c", "asset"),
        AssetRef("s3://bucket/z", "s3://bucket/z", "out"),
    ]


def test_a_dag_without_assets_serializes_empty_asset_fields():
    with Dag("plain", schedule="@daily", start_date=dt.datetime(2026, 1, 1)) as built:
        CommandTask("only", "true")
    again = round_trip(built).dag
    assert again.schedule.assets is None
    assert again.assets == []
    assert again.task("only").outlets == []


def test_documents_written_before_assets_still_decode():
    with Dag("old", schedule="@daily", start_date=dt.datetime(2026, 1, 1)) as built:
        CommandTask("only", "true")
    raw = msgspec.json.decode(
        serialize.encode(serialize.DagDocument(1, serialize.serialize(built), ""))
    )
    del raw["dag"]["assets"], raw["dag"]["schedule"]["assets"], raw["dag"]["tasks"][0]["outlets"]
    again = serialize.decode(msgspec.json.encode(raw))
    assert again.dag.assets == []
    assert again.dag.task("only").outlets == []


@pytest.mark.parametrize("where", ["schedule", "tasks"])
def test_two_assets_with_one_uri_and_different_names_are_refused(where):
    renamed = Asset("s3://bucket/a", name="renamed")
    with Dag("conflict", schedule=[A, renamed] if where == "schedule" else A) as built:
        CommandTask("first", "true", outlets=[A] if where == "schedule" else [renamed])
    with pytest.raises(DagDefinitionError) as raised:
        serialize.serialize(built)
    message = str(raised.value)
    assert message.startswith(f"{HERE}: Dag 'conflict': ")
    assert "asset 's3://bucket/a' is named 's3://bucket/a' in group 'asset' and 'renamed'" in (
        message
    )
    assert ("task 'first'" in message) == (where == "tasks")
