"""Branching, short-circuit and task groups end to end: the scheduler, executor workers,
supervisors (which decide the skips) and real task processes, under each start method,
through the pytest plugin's ``spawnflow_env`` (the path of ``spawnflow dags test``)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.process

DAGS = """
from spawnflow import Dag, TaskGroup, task

with Dag("branching"):
    @task.branch
    def pick():
        return "left"

    @task
    def left():
        return "L"

    @task
    def right():
        return "R"

    @task
    def after_right():
        return "never"

    @task
    def kept():  # downstream of pick and of left: following left keeps it
        return "kept"

    def joined():
        return "joined"

    joins = {rule: task(trigger_rule=rule, task_id=f"join_{rule}")(joined)()
             for rule in ("all_success", "none_failed_min_one_success", "none_failed",
                          "one_success", "all_done", "none_skipped")}

    chooser, l, r, k = pick(), left(), right(), kept()
    chooser >> [l, r]
    r >> after_right()
    chooser >> k
    l >> k
    for join in joins.values():
        [l, r] >> join

with Dag("short_circuits"):
    @task.short_circuit
    def no():
        return []

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def no_but_rules():
        return 0

    @task.short_circuit
    def yes():
        return "go"

    @task
    def step(n):
        return n

    cut = no()
    a1 = step(1)
    def done():
        return "done"

    a2 = task(trigger_rule="all_done", task_id="cut_all_done")(done)()
    cut >> a1 >> a2
    b1 = step(3)
    b2 = task(trigger_rule="all_done", task_id="ruled_all_done")(done)()
    no_but_rules() >> b1 >> b2
    c1 = step(5)
    yes() >> c1

with Dag("unknown_branch"):
    @task.branch
    def pick():
        return ["there", "nowhere"]

    @task
    def there():
        return 1

    pick() >> there()

with Dag("grouped_branch"):
    @task.branch
    def pick():
        return "extract"  # a group: its roots run

    with TaskGroup("extract") as extract:
        @task
        def load():
            return 1

        @task
        def clean(n):
            return n + 1

        cleaned = clean(load())
        with TaskGroup("inner"):  # tasks join the group they are created in
            @task
            def check():
                return "ok"

            cleaned >> check()

    with TaskGroup("other") as other:
        @task
        def unused():
            return 0

        unused()

    @task(trigger_rule="none_failed_min_one_success")
    def report():
        return "done"

    pick() >> [extract, other]
    [extract, other] >> report()
"""


@pytest.fixture
def dags(spawnflow_env):
    spawnflow_env.add_dag_file("branching_dags", DAGS)
    return spawnflow_env


def states(result) -> dict[str, str]:
    return {task_id: task.state for task_id, task in result.tasks.items()}


def test_a_branch_skips_what_it_did_not_follow_and_joins_follow_their_rules(dags):
    result = dags.run_dag("branching")

    assert result.state == "success"
    assert states(result) == {
        "pick": "success",
        "left": "success",
        "right": "skipped",
        "after_right": "skipped",
        "kept": "success",
        "join_all_success": "skipped",
        "join_none_failed_min_one_success": "success",
        "join_none_failed": "success",
        "join_one_success": "success",
        "join_all_done": "success",
        "join_none_skipped": "skipped",
    }
    assert result["pick"].return_value == "left"
    assert result["right"].reason == "branch task 'pick' followed 'left'"
    assert result["after_right"].reason == "its trigger rule was not met"


def test_a_false_short_circuit_skips_downstream_and_a_true_one_skips_nothing(dags):
    result = dags.run_dag("short_circuits")

    assert result.state == "success"
    assert states(result) == {
        "no": "success",
        "step": "skipped",
        "cut_all_done": "skipped",  # every task downstream, whatever its rule
        "no_but_rules": "success",
        "step__1": "skipped",
        "ruled_all_done": "success",  # only the direct ones: its rule decides
        "yes": "success",
        "step__2": "success",
    }
    assert result["step"].reason == "short-circuit task 'no' returned a false value"
    assert result["yes"].return_value == "go"


def test_a_branch_that_returns_an_unknown_task_id_fails_naming_it(dags):
    result = dags.run_dag("unknown_branch")

    assert result.state == "failed"
    assert result["pick"].state == "failed"
    assert result["pick"].reason == (
        "branch task 'pick' returned 'nowhere', which Dag 'unknown_branch' has no task or "
        "task group of; it can follow 'there'"
    )
    assert result["there"].state == "upstream_failed"


def test_a_branch_to_a_task_group_runs_the_group_and_skips_the_other(dags):
    result = dags.run_dag("grouped_branch")

    assert result.state == "success"
    assert states(result) == {
        "pick": "success",
        "extract.load": "success",
        "extract.clean": "success",
        "extract.inner.check": "success",
        "other.unused": "skipped",
        "report": "success",
    }
    assert result["extract.inner.check"].return_value == "ok"
