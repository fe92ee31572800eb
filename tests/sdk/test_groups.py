"""Task groups: prefixed ids, nesting, dependencies on whole groups, @task_group, and
what the serialized Dag keeps of them."""

from __future__ import annotations

import pytest

from spawnflow import CommandTask, Dag, DagDefinitionError, TaskGroup, task, task_group
from spawnflow.sdk import serialize


def test_tasks_in_a_group_get_its_id_as_a_prefix_and_nested_groups_add_theirs():
    with Dag("grouped") as built:
        with TaskGroup("extract") as extract:
            CommandTask("load", "true")
            with TaskGroup("clean") as clean:
                CommandTask("dedupe", "true")
        CommandTask("load", "true")  # outside: no prefix, no clash
    assert sorted(built.task_dict) == ["extract.clean.dedupe", "extract.load", "load"]
    assert clean.group_id == "extract.clean"
    assert [t.task_id for t in extract.tasks] == ["extract.load", "extract.clean.dedupe"]
    assert clean.chain == ["extract", "extract.clean"]


def test_a_group_without_prefix_keeps_the_ids_of_its_tasks():
    with Dag("flat") as built, TaskGroup("quiet", prefix_group_id=False):
        CommandTask("a", "true")
    assert list(built.task_dict) == ["a"]


def test_a_task_function_called_twice_in_a_group_gets_a_free_prefixed_id():
    with Dag("twice") as built:

        @task
        def load():
            return 1

        load()
        with TaskGroup("g"):
            load()
            load()
    assert sorted(built.task_dict) == ["g.load", "g.load__1", "load"]


def test_dependencies_on_a_group_are_on_its_roots_and_leaves():
    with Dag("edges") as built:
        start, end = CommandTask("start", "true"), CommandTask("end", "true")
        with TaskGroup("work") as work:
            a, b, c = (CommandTask(name, "true") for name in "abc")
            a >> [b, c]
        with TaskGroup("more") as more:
            CommandTask("d", "true")
        start >> work >> more
        [work, more] >> end
    assert built.get_task("work.a").upstream_task_ids == {"start"}
    assert built.get_task("more.d").upstream_task_ids == {"work.b", "work.c"}
    assert built.get_task("end").upstream_task_ids == {"work.b", "work.c", "more.d"}
    assert built.get_task("start").downstream_task_ids == {"work.a"}


def test_shifts_both_ways_between_groups_task_outputs_and_lists():
    with Dag("shifts") as built:

        @task
        def s():
            return 1

        with TaskGroup("a") as a:
            s() >> s()
        with TaskGroup("b") as b:
            s()
        with TaskGroup("c") as c:
            s()
        first, second, third = s(), s(), s()
        a << first  # group << task output: the roots wait
        b << a  # group << group: b's roots wait for a's leaves
        second << b  # task output << group: it waits for the leaves
        [second] >> c  # list >> group
        c >> [third]  # group >> list
        [a, b] >> third  # groups in a list >> task output

    def upstream(task_id: str) -> set[str]:
        return built.get_task(task_id).upstream_task_ids

    assert upstream("a.s") == {"s"}
    assert upstream("b.s") == {"a.s__1"}
    assert upstream("s__1") == {"b.s"}
    assert upstream("c.s") == {"s__1"}
    assert upstream("s__2") == {"c.s", "a.s__1", "b.s"}


def test_a_task_group_function_makes_a_group_per_call():
    with Dag("decorated") as built:

        @task_group
        def section():
            CommandTask("first", "true") >> CommandTask("second", "true")

        @task_group(group_id="named")
        def other():
            CommandTask("only", "true")

        one, two = section(), section()
        one >> two >> other()
    assert sorted(built.task_dict) == [
        "named.only", "section.first", "section.second",
        "section__1.first", "section__1.second",
    ]  # fmt: skip
    assert built.get_task("section__1.first").upstream_task_ids == {"section.second"}
    assert built.get_task("named.only").upstream_task_ids == {"section__1.second"}


def test_group_mistakes_are_definition_errors():
    with pytest.raises(DagDefinitionError, match="task group 'g' was created outside a Dag"):
        TaskGroup("g")
    with Dag("mistakes"):
        TaskGroup("g")
        with pytest.raises(DagDefinitionError, match="task group id 'g' is already used"):
            TaskGroup("g")
        with pytest.raises(DagDefinitionError, match="task group id 'bad id' must be"):
            TaskGroup("bad id")
        empty, first = TaskGroup("empty"), CommandTask("a", "true")
        with pytest.raises(DagDefinitionError, match="task group 'empty' has no tasks"):
            first >> empty


def test_the_serialized_dag_names_the_groups_of_each_task():
    with Dag("stored") as built:
        CommandTask("alone", "true")
        with TaskGroup("outer"), TaskGroup("inner"):
            CommandTask("deep", "true")
    tasks = {t.task_id: t for t in serialize.serialize(built).tasks}
    assert tasks["outer.inner.deep"].groups == ["outer", "outer.inner"]
    assert tasks["alone"].groups == []
