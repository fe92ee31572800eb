"""``spawnflow tasks test`` on mapped tasks: one element runs in a real task process
(the first, or ``--map-index N``), over a literal list or an upstream output given with
``--xcom``, under every start method; what cannot be an element fails in one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.commands.test_cli import assert_user_error, run
from tests.processors import dagfiles

pytestmark = pytest.mark.process

MAPPED = """
from spawnflow import Dag, task


@task
def numbers():
    return [1, 2, 3]


@task
def add(x, y):
    return x + y


@task
def label(name, suffix):
    return f"{name}-{suffix}"


with Dag("mapped"):
    add.partial(y=100).expand(x=[1, 2, 3])
    add.partial(y=10).expand(x=numbers())
    label.expand_kwargs([{"name": "a", "suffix": "x"}, {"name": "b", "suffix": "y"}])
"""


@pytest.fixture
def mapped(project):
    dagfiles.write(Path(project["SPAWNFLOW__CORE__DAGS_FOLDER"]), "mapped.py", MAPPED)
    return project


def _test(env, start_method, *args):
    return run("--start-method", start_method, "tasks", "test", "mapped", *args, env=env)


def test_a_mapped_task_runs_its_first_element_unless_told_which(mapped, start_method):
    first = _test(mapped, start_method, "add")
    assert first.exit_code == 0, first.output
    assert "XCom return_value: 101" in first.stdout

    third = _test(mapped, start_method, "add", "--map-index", "2")
    assert third.exit_code == 0, third.output
    assert "XCom return_value: 103" in third.stdout


def test_an_element_of_an_upstream_output_given_with_xcom(mapped, start_method):
    result = _test(mapped, start_method, "add__1", "--map-index", "1", "--strict",
                   "--xcom", "numbers=[5, 6, 7]")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "XCom return_value: 16" in result.stdout


def test_expand_kwargs_runs_the_dict_at_the_map_index(mapped, start_method):
    result = _test(mapped, start_method, "label", "--map-index", "1")
    assert result.exit_code == 0, result.output
    assert "XCom return_value: 'b-y'" in result.stdout


def test_an_upstream_output_that_is_not_a_list_fails_the_task_in_one_sentence(mapped, start_method):
    result = _test(mapped, start_method, "add__1", "--xcom", "numbers=7")
    assert result.exit_code == 1, result.output
    assert (
        "Task 'add__1': failed (expand() argument 'x' must be a list, but the output of task "
        "'numbers' is int 7)"
    ) in result.stdout


def test_a_map_index_past_the_end_fails_the_task_naming_the_count(mapped, start_method):
    result = _test(mapped, start_method, "add", "--map-index", "3")
    assert result.exit_code == 1, result.output
    assert (
        "Task 'add': failed (mapped task 'add' has 3 elements now, none at map index 3)"
    ) in result.stdout


def test_a_map_index_for_an_unmapped_task_is_a_user_error(mapped):
    result = run("tasks", "test", "mapped", "numbers", "--map-index", "0", env=mapped)
    assert_user_error(result, "Task 'numbers' of Dag 'mapped' is not mapped: it takes no map index")
