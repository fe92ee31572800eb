"""Which tasks a branch or short-circuit skips (the supervisor's decision), without a
database or a process; the end-to-end runs are in tests/scheduler/test_branching.py."""

from __future__ import annotations

import pytest

from spawnflow import Dag, TaskGroup, task
from spawnflow.comms.tasks import Follow
from spawnflow.processors.worker.skipping import UnknownChoice, plan
from spawnflow.sdk import serialize
from spawnflow.sdk.branching import BranchTask, ShortCircuitTask


def _doc():
    with Dag("choices") as built:

        @task.branch
        def pick():
            return "a"

        @task.short_circuit
        def gate():
            return False

        @task
        def step():
            return 1

        chooser, a, b, join = pick(), step(), step(), step()
        chooser >> [a, b, join]
        a >> join  # join is downstream of a: following a keeps it
        with TaskGroup("g") as group:
            first = step()
            first >> step()
        chooser >> group
        gate() >> step() >> step()
    return serialize.serialize(built)


def test_a_branch_skips_the_direct_downstream_it_did_not_choose_nor_reach():
    skipped, why = plan(_doc(), "pick", Follow(task_ids=["step"]))
    assert skipped == ["g.step", "step__1"]
    assert why == "branch task 'pick' followed 'step'"


def test_a_branch_to_a_group_follows_its_roots_and_none_skips_every_direct_one():
    assert plan(_doc(), "pick", Follow(task_ids=["g"]))[0] == ["step", "step__1", "step__2"]
    assert plan(_doc(), "pick", Follow(task_ids=[]))[0] == [
        "g.step", "step", "step__1", "step__2"
    ]  # fmt: skip


def test_an_id_the_dag_does_not_have_is_refused_by_name():
    with pytest.raises(UnknownChoice, match="returned 'nope', which Dag 'choices' has no"):
        plan(_doc(), "pick", Follow(task_ids=["step", "nope"]))


def test_a_short_circuit_skips_all_downstream_or_only_the_direct_tasks():
    doc = _doc()
    assert plan(doc, "gate", Follow([], whole_downstream=True))[0] == ["step__3", "step__4"]
    assert plan(doc, "gate", Follow([], whole_downstream=False))[0] == ["step__3"]


def test_what_a_branch_function_may_return():
    with Dag("returns"):
        branch = BranchTask("b", lambda: None)
        gate = ShortCircuitTask("s", lambda: None, ignore_downstream_trigger_rules=False)
        branch >> [BranchTask("x", lambda: None), BranchTask("y", lambda: None)]
    assert branch.follow("x") == Follow(["x"])
    assert branch.follow(["y", "x", "x"]) == Follow(["x", "y"])
    assert branch.follow(None) == Follow([])
    with pytest.raises(ValueError, match="branch task 'b' returned int 3: return a task id"):
        branch.follow(3)
    assert gate.follow("yes") is None
    assert gate.follow(0) == Follow([], whole_downstream=False)


def test_a_branch_refuses_an_id_its_dag_lacks_naming_it_and_what_it_can_follow():
    """Checked in the task process, before the try's success is reported."""
    with Dag("refuses"):
        branch = BranchTask("b", lambda: None)
        with TaskGroup("outer"), TaskGroup("inner") as inner:
            inside = BranchTask("t", lambda: None)
        branch >> [inner, BranchTask("plain", lambda: None)]
        lonely = BranchTask("lonely", lambda: None)
    assert branch.choices() == ["outer", "outer.inner", "outer.inner.t", "plain"]
    assert branch.follow(["outer", inside.task_id, "lonely"]).task_ids == [
        "lonely",
        "outer",
        "outer.inner.t",
    ]  # any task or group of the Dag, as Airflow accepts
    with pytest.raises(ValueError, match=r"returned 'nope', 'outer\.nope'") as refused:
        branch.follow(["plain", "nope", "outer.nope"])
    assert str(refused.value) == (
        "branch task 'b' returned 'nope', 'outer.nope', which Dag 'refuses' has no task or "
        "task group of; it can follow 'outer', 'outer.inner', 'outer.inner.t', 'plain'"
    )
    with pytest.raises(ValueError, match=r"of; it has no task downstream$"):
        lonely.follow("nope")
