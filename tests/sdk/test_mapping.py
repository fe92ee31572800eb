"""Dynamic task mapping in the SDK: expand, partial, expand_kwargs, what the serialized
task keeps of them, and how the elements are made from it."""

from __future__ import annotations

import re

import pytest

from spawnflow import CommandTask, Dag, DagDefinitionError, PythonTask, task
from spawnflow.sdk import mapping, serialize


@task
def add(x, y=0):
    return x + y


@task
def numbers():
    return [1, 2, 3]


@task
def total(values):
    return sum(values)


def test_expand_over_a_literal_list_is_serialized_with_the_list():
    with Dag("literal") as built:
        add.expand(x=[1, 2, 3])
    stored = serialize.serialize(built).task("add")
    assert stored.is_mapped
    assert stored.expand == {"kind": "expand", "mapped": {"x": [1, 2, 3]}}
    assert mapping.elements(stored.expand, {}) == [{"x": 1}, {"x": 2}, {"x": 3}]


def test_expand_over_an_upstream_output_depends_on_that_task():
    with Dag("upstream") as built:
        add.partial(y=10).expand(x=numbers())
    stored = serialize.serialize(built)
    mapped = stored.task("add")
    assert mapped.upstream == ["numbers"]
    assert mapped.arguments["op_kwargs"] == {"y": 10}
    assert mapping.references(mapped.expand) == [{"__xcom__": "numbers", "key": "return_value"}]
    assert mapping.elements(mapped.expand, {"numbers": [4, 5]}) == [{"x": 4}, {"x": 5}]
    assert not stored.task("numbers").is_mapped


def test_expand_over_several_arguments_makes_their_cross_product_the_last_fastest():
    with Dag("product") as built:
        add.expand(x=[1, 2], y=(10, 20))
    stored = serialize.serialize(built).task("add")
    assert mapping.elements(stored.expand, {}) == [
        {"x": 1, "y": 10},
        {"x": 1, "y": 20},
        {"x": 2, "y": 10},
        {"x": 2, "y": 20},
    ]


def test_expand_kwargs_maps_over_dicts_literal_or_from_upstream():
    with Dag("kwargs") as built:

        @task
        def pairs():
            return [{"x": 1, "y": 2}]

        add.expand_kwargs([{"x": 1, "y": 2}, {"x": 3}])
        add.expand_kwargs(pairs())
    stored = serialize.serialize(built)
    literal = stored.task("add").expand
    assert mapping.elements(literal, {}) == [{"x": 1, "y": 2}, {"x": 3}]
    from_upstream = stored.task("add__1")
    assert from_upstream.upstream == ["pairs"]
    assert mapping.elements(from_upstream.expand, {"pairs": [{"x": 5}]}) == [{"x": 5}]


def test_a_mapped_tasks_output_is_an_argument_of_a_downstream_task():
    with Dag("downstream") as built:
        total(add.expand(x=[1, 2]))
    stored = serialize.serialize(built)
    assert stored.task("total").upstream == ["add"]
    assert not stored.task("total").is_mapped


def test_an_empty_list_makes_no_elements():
    with Dag("empty") as built:
        add.expand(x=[])
    assert mapping.elements(serialize.serialize(built).task("add").expand, {}) == []


def test_an_upstream_value_that_is_not_a_list_is_named_in_one_sentence():
    with Dag("not_a_list") as built:
        listed = numbers()
        add.expand(x=listed)
        add.expand_kwargs(listed)
    stored = serialize.serialize(built)
    with pytest.raises(ValueError, match=r"^expand\(\) argument 'x' must be a list, but the "
                       r"output of task 'numbers' is int 7$"):  # fmt: skip
        mapping.elements(stored.task("add").expand, {"numbers": 7})
    with pytest.raises(ValueError, match=r"^expand_kwargs\(\) needs a list of dicts, but the "
                       r"output of task 'numbers' is list \[1, 2\]$"):  # fmt: skip
        mapping.elements(stored.task("add__1").expand, {"numbers": [1, 2]})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: add.expand(), "expand\\(\\) needs at least one keyword argument"),
        (lambda: add.partial(x=1).expand(x=[2]), "'x' is given to both partial\\(\\) and"),
        (lambda: add.expand(x=5), "argument 'x' must be a list or a task's output, not int 5"),
        (lambda: add.expand_kwargs([1, 2]), "expand_kwargs\\(\\) takes a list of dicts"),
        (lambda: add.expand_kwargs({"x": 1}), "expand_kwargs\\(\\) takes a list of dicts"),
    ],
)
def test_a_wrong_expansion_is_a_definition_error_naming_dag_and_task(build, message):
    with (
        Dag("wrong"),
        pytest.raises(DagDefinitionError, match=f"Dag 'wrong': task 'add': .*{message}"),
    ):
        build()


def test_max_active_tis_per_dag_is_serialized_and_checked():
    with Dag("bounded", default_args={"max_active_tis_per_dag": 3}) as built:
        add.expand(x=[1])

        @task(max_active_tis_per_dag=1)
        def one():
            return 1

        one()
    stored = serialize.serialize(built)
    assert stored.task("add").max_active_tis_per_dag == 3
    assert stored.task("one").max_active_tis_per_dag == 1
    with Dag("zero"), pytest.raises(DagDefinitionError, match="max_active_tis_per_dag 0 must"):
        task(max_active_tis_per_dag=0)(numbers.__wrapped__)()


def test_the_task_process_finds_an_elements_arguments_from_the_imported_dag():
    marker = object()  # a value the serialized Dag could not carry
    with Dag("runtime") as built:
        add.partial(y=1).expand(x=numbers())
        add.expand(x=[marker, 2])
    upstream = built.task_dict["add"]
    assert mapping.element_kwargs(upstream, 1, lambda source: [7, 8]) == {"x": 8}
    assert mapping.element_kwargs(built.task_dict["add__1"], 0, lambda source: None) == {
        "x": marker
    }
    with pytest.raises(IndexError, match="has 2 elements now, none at map index 2"):
        mapping.element_kwargs(upstream, 2, lambda source: [7, 8])


def test_a_task_function_still_creates_an_unmapped_task_when_called():
    with Dag("plain") as built:
        total(numbers())
    assert add.__name__ == "add"
    assert add.__wrapped__(1, 2) == 3
    assert not any(serialize.serialize(built).task(t).is_mapped for t in built.task_dict)


def test_the_round_trip_keeps_the_expansion():
    with Dag("round_trip") as built:
        add.partial(y=2).expand(x=numbers())
    document = serialize.DagDocument(
        version=serialize.VERSION, dag=serialize.serialize(built), file_hash=""
    )
    again = serialize.decode(serialize.encode(document))
    assert again == document
    assert again.dag.task("add").expand == document.dag.task("add").expand


def test_a_command_task_class_maps_over_its_command_env_and_cwd():
    with Dag("classic") as built:
        CommandTask.partial(task_id="greet", env={"X": "1"}).expand(command=["echo a", "echo b"])
        CommandTask.partial(task_id="each").expand_kwargs(
            [{"command": "echo c", "cwd": "/tmp"}, {"command": "echo d", "env": {"Y": "2"}}]
        )
        CommandTask.partial(task_id="over").expand(command=numbers())
    stored = serialize.serialize(built)
    assert stored.task("greet").expand == {
        "kind": "expand", "mapped": {"command": ["echo a", "echo b"]}, "attributes": True
    }  # fmt: skip
    assert stored.task("greet").arguments["env"] == {"X": "1"}
    assert stored.task("each").expand["kind"] == "expand_kwargs"
    assert stored.task("over").upstream == ["numbers"]

    greet = built.task_dict["greet"]
    greet.take_mapped({"command": "echo b"})
    assert (greet.command, greet.env) == ("echo b", {"X": "1"})
    with pytest.raises(ValueError, match="CommandTask 'greet' cannot map 'shell'; it maps"):
        greet.take_mapped({"shell": "bash"})
    with pytest.raises(ValueError, match="the mapped command is 3, not a non-empty string"):
        greet.take_mapped({"command": 3})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: CommandTask.partial(env={}).expand(command=["x"]),
         "CommandTask.partial() needs task_id="),
        (lambda: PythonTask.partial(task_id="p").expand(op_args=[[1]]),
         "PythonTask cannot be mapped; map a @task function instead"),
        (lambda: CommandTask.partial(task_id="c").expand(shell=["sh"]),
         "CommandTask cannot map 'shell'; it maps command, env, cwd"),
        (lambda: CommandTask.partial(task_id="c").expand(command="x"),
         "expand() argument 'command' must be a list or a task's output"),
    ],
)  # fmt: skip
def test_a_task_class_mapped_wrongly_is_a_definition_error(build, message):
    with Dag("wrong"), pytest.raises(DagDefinitionError, match=re.escape(message)):
        build()
