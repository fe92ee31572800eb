"""The authoring API: building Dags and tasks, and every way a definition can be wrong."""

from __future__ import annotations

import datetime as dt

import pytest

from spawnflow import CommandTask, Dag, DagDefinitionError, PythonTask, TriggerRule, dag, task
from spawnflow.sdk import building, schedule

START = dt.datetime(2026, 1, 1)
HERE = __file__


def test_context_manager_builds_tasks_and_dependencies_with_lists():
    with Dag("pipeline", schedule="@hourly", start_date=START) as built:
        a, b, c, d = (CommandTask(name, f"echo {name}") for name in "abcd")
        a >> [b, c] >> d
    assert built.get_task("a").downstream_task_ids == {"b", "c"}
    assert built.get_task("d").upstream_task_ids == {"b", "c"}
    assert built.topological_order() == ["a", "b", "c", "d"]
    assert built.fileloc == HERE


def test_left_shift_and_reflected_operators():
    with Dag("shifts") as built:
        a, b, c = (CommandTask(name, "true") for name in "abc")
        c << a
        [a, b] >> c
        b << a
    assert built.get_task("c").upstream_task_ids == {"a", "b"}
    assert built.get_task("b").upstream_task_ids == {"a"}


def test_task_outputs_passed_as_arguments_create_dependencies():
    @dag(schedule=None)
    def passing():
        @task
        def numbers() -> list[int]:
            return [1, 2]

        @task
        def total(values: list[int], *, scale: int) -> int:
            return sum(values) * scale

        @task.command
        def show(value: int) -> str:
            return f"echo {value}"

        show(total(numbers(), scale=3))

    built = passing()
    assert built.dag_id == "passing"
    assert built.topological_order() == ["numbers", "total", "show"]
    total_task = built.get_task("total")
    assert isinstance(total_task, PythonTask)
    assert total_task.arguments()["op_args"] == [{"__xcom__": "numbers", "key": "return_value"}]
    assert total_task.arguments()["op_kwargs"] == {"scale": 3}
    assert isinstance(built.get_task("show"), CommandTask)


def test_default_args_apply_to_tasks_and_task_arguments_win():
    defaults = {"retries": 3, "retry_delay": 30, "trigger_rule": "all_done"}
    with Dag("defaults", default_args=defaults) as built:
        first = CommandTask("first", "true")
        second = CommandTask("second", "true", retries=0, trigger_rule=TriggerRule.ONE_FAILED)
    assert (first.retries, first.retry_delay, first.trigger_rule) == (
        3,
        dt.timedelta(seconds=30),
        TriggerRule.ALL_DONE,
    )
    assert (second.retries, second.trigger_rule) == (0, TriggerRule.ONE_FAILED)
    assert built.tasks == [first, second]


@pytest.mark.parametrize(
    ("value", "kind", "shown"),
    [
        (None, "manual", "None (manual)"),
        ("@once", "once", "@once"),
        ("@daily", "cron", "@daily"),
        ("*/15  * * * *", "cron", "*/15 * * * *"),
        (dt.timedelta(hours=2), "interval", "2:00:00"),
    ],
)
def test_schedules(value, kind, shown):
    parsed = schedule.parse(value)
    assert (parsed.kind, parsed.describe()) == (kind, shown)


def test_naive_start_dates_are_utc_and_aware_ones_keep_their_zone():
    plus_two = dt.timezone(dt.timedelta(hours=2))
    naive = Dag("naive", schedule="@daily", start_date=START)
    aware = Dag("aware", schedule="@daily", start_date=START.replace(tzinfo=plus_two))
    assert naive.start_date.tzinfo is dt.UTC
    assert aware.start_date.utcoffset() == dt.timedelta(hours=2)


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (lambda: Dag("bad id!"), "dag id 'bad id!' must be 1-250 letters"),
        (lambda: Dag("x", schedule="every day", start_date=START),
         "schedule 'every day' is not a cron expression of five fields"),
        (lambda: Dag("x", schedule="61 * * * *", start_date=START),
         "schedule '61 * * * *' is not a valid cron expression"),
        (lambda: Dag("x", schedule="@never", start_date=START),
         "schedule '@never' is not a preset; presets: @once, @hourly"),
        (lambda: Dag("x", schedule="@dayly", start_date=START),
         "schedule '@dayly' is not a preset; did you mean '@daily'? presets: @once, "),
        (lambda: Dag("x", schedule="@daily"), "needs a start_date"),
        (lambda: Dag("x", max_active_runs=0), "max_active_runs 0 must be a whole number"),
    ],
)  # fmt: skip
def test_bad_dag_arguments_name_the_file_and_dag(build, problem):
    with pytest.raises(DagDefinitionError) as raised:
        build()
    message = str(raised.value)
    assert message.startswith(f"{HERE}: Dag ")
    assert problem in message


def build_cycle() -> None:
    with Dag("cyclic"):
        a, b, c = (CommandTask(name, "true") for name in "abc")
        a >> b >> c >> a


def test_a_cycle_names_the_file_the_dag_and_the_tasks_in_it():
    with pytest.raises(DagDefinitionError) as raised:
        build_cycle()
    assert str(raised.value) == (
        f"{HERE}: Dag 'cyclic': task 'a': the tasks form a cycle: a >> b >> c >> a"
    )


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (lambda: [CommandTask("same", "true"), CommandTask("same", "true")],
         "task 'same': a task with this id already exists"),
        (lambda: CommandTask("bad/id", "true"), "task 'bad/id': task id 'bad/id' must be"),
        (lambda: CommandTask("t", "true", retries=-1), "retries -1 must be a whole number"),
        (lambda: CommandTask("t", "true", trigger_rule="sometimes"),
         "trigger_rule 'sometimes' must be one of all_success"),
        (lambda: CommandTask("t", "true", execution_timeout="soon"),
         "execution_timeout 'soon' must be a non-negative timedelta"),
    ],
)  # fmt: skip
def test_bad_tasks_name_the_file_dag_and_task(build, problem):
    with pytest.raises(DagDefinitionError) as raised, Dag("tasks"):
        build()
    assert str(raised.value).startswith(f"{HERE}: Dag 'tasks': ")
    assert problem in str(raised.value)


def test_a_task_outside_a_dag_says_how_to_create_one():
    with pytest.raises(DagDefinitionError, match="was created outside a Dag"):
        CommandTask("lonely", "true")


def test_dependencies_across_dags_are_refused():
    with Dag("one"):
        a = CommandTask("a", "true")
    with (
        pytest.raises(DagDefinitionError, match="task 'b': cannot depend on task 'a' of Dag 'one'"),
        Dag("two"),
    ):
        a >> CommandTask("b", "true")


def test_built_dags_are_collected_for_the_file_parser():
    building.forget_built_dags()
    first, second = Dag("first"), Dag("second")
    assert building.built_dags() == [first, second]
    building.forget_built_dags()
    assert building.built_dags() == []


def test_a_start_dates_time_zone_survives_serialization():
    from zoneinfo import ZoneInfo

    from spawnflow.sdk import serialize

    built = Dag(
        "paris",
        schedule="0 6 * * *",
        start_date=dt.datetime(2026, 1, 1, tzinfo=ZoneInfo("Europe/Paris")),
    )
    document = serialize.serialize(built)
    again = serialize.decode(
        serialize.encode(serialize.DagDocument(version=1, dag=document, file_hash=""))
    ).dag
    assert again.timezone == "Europe/Paris"
    assert schedule.zone_from_name(again.timezone) == ZoneInfo("Europe/Paris")
    offset = dt.timezone(dt.timedelta(hours=-3, minutes=-30))
    assert schedule.zone_from_name(schedule.zone_name(offset)) == offset


def test_calling_a_task_function_twice_gives_numbered_task_ids():
    with Dag("loops") as built:

        @task
        def step(n: int) -> int:
            return n

        for n in range(3):
            step(n)
    assert list(built.task_dict) == ["step", "step__1", "step__2"]


def test_arguments_serialize_the_same_in_every_process():
    from spawnflow.sdk.tasks import to_json

    class Thing:
        pass

    assert to_json({"b", "a"}) == ["a", "b"]
    assert to_json({2: "two", 1: "one"}) == {"__pairs__": [[1, "one"], [2, "two"]]}
    assert to_json(Thing()) == {"__object__": f"{__name__}.{Thing.__qualname__}"}
