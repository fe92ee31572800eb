"""Branching: tasks that choose which of the tasks downstream of them run.

``@task.branch`` decorates a function that returns the id of the task to follow, a
list of them, or None (follow none); a task group's id follows the group's roots.
The tasks directly downstream that were not chosen, and are not downstream of one
that was, are ``skipped``; the skips then spread by trigger rules, as in Airflow: a
join with ``all_success`` is skipped too, one with ``none_failed_min_one_success``
runs after the branch that ran.

``@task.short_circuit`` decorates a function whose false return value skips every
task downstream (with ``ignore_downstream_trigger_rules=False``, only the direct
ones, and trigger rules decide about the rest); a true value skips nothing.

The task process only reports what the function chose. Which task instances are
skipped is decided by the task's supervisor, which has the database, in the same
transaction as the task's success; it fails the task if an id is not in the Dag.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spawnflow.comms.tasks import Follow
from spawnflow.sdk.tasks import PythonTask, Task, add_decorator_kind


class BranchTask(PythonTask):
    """Runs a Python callable that returns the task or task group id (or a list of
    ids, or None) to follow; the other tasks directly downstream are skipped.

    Takes :class:`~spawnflow.sdk.tasks.PythonTask`'s arguments.
    """

    kind = "branch"

    def follow(self, returned: Any) -> Follow:
        """What the callable chose; ValueError if it returned something else than ids."""
        if returned is None:
            return Follow(task_ids=[])
        if isinstance(returned, str):
            return Follow(task_ids=[returned])
        if isinstance(returned, list | tuple | set | frozenset) and all(
            isinstance(item, str) for item in returned
        ):
            return Follow(task_ids=sorted(set(returned)))
        raise ValueError(
            f"branch task {self.task_id!r} returned {type(returned).__name__} {returned!r}: "
            "return a task id, a list of task ids or None"
        )


class ShortCircuitTask(PythonTask):
    """Runs a Python callable; a false return value skips the tasks downstream.

    Args:
        ignore_downstream_trigger_rules: True (the default): every task downstream is
            skipped, whatever its trigger rule. False: only the direct ones, and the
            trigger rules of the tasks after them decide.

    Takes :class:`~spawnflow.sdk.tasks.PythonTask`'s other arguments.
    """

    kind = "short_circuit"

    def __init__(self, task_id: str, python_callable: Callable[..., Any], *,
                 ignore_downstream_trigger_rules: bool = True, **kwargs: Any):  # fmt: skip
        self.ignore_downstream_trigger_rules = bool(ignore_downstream_trigger_rules)
        super().__init__(task_id, python_callable, **kwargs)

    def arguments(self) -> dict[str, Any]:
        ignore = self.ignore_downstream_trigger_rules
        return {**super().arguments(), "ignore_downstream_trigger_rules": ignore}

    def follow(self, returned: Any) -> Follow | None:
        """None (skip nothing) for a true value; for a false one, follow nothing."""
        if returned:
            return None
        return Follow(task_ids=[], whole_downstream=self.ignore_downstream_trigger_rules)


def follow_of(task: Task, returned: Any) -> Follow | None:
    """What ``task`` chose by returning ``returned``, if it is a task that chooses."""
    if isinstance(task, BranchTask | ShortCircuitTask):
        return task.follow(returned)
    return None


add_decorator_kind("branch", BranchTask)
add_decorator_kind("short_circuit", ShortCircuitTask)
