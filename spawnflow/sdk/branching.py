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

The task process checks what the function chose against the Dag it imported (an id
that is neither a task nor a task group of it fails the try there, before any success
callback) and reports it. Which task instances are skipped is decided by the task's
supervisor, which has the database, in the same transaction as the task's success;
it fails the task too if the stored Dag, which may be newer, lacks an id.
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
        """What the callable chose.

        Raises:
            ValueError: it returned something else than ids, or an id that is neither a
                task nor a task group of its Dag (naming it, and the ids it can follow).
        """
        if returned is None:
            ids: list[str] = []
        elif isinstance(returned, str):
            ids = [returned]
        elif isinstance(returned, list | tuple | set | frozenset) and all(
            isinstance(item, str) for item in returned
        ):
            ids = sorted(set(returned))
        else:
            raise ValueError(
                f"branch task {self.task_id!r} returned {type(returned).__name__} "
                f"{returned!r}: return a task id, a list of task ids or None"
            )
        # Checked here, in the task process, against the Dag it imported: the try
        # fails before its success is reported, so on_failure_callback (not
        # on_success_callback) runs. The supervisor checks again against the stored Dag.
        known = self.dag.task_dict.keys() | self.dag.task_groups.keys()
        unknown = [chosen for chosen in ids if chosen not in known]
        if unknown:
            names = ", ".join(repr(name) for name in unknown)
            choices = ", ".join(repr(name) for name in self.choices())
            raise ValueError(
                f"branch task {self.task_id!r} returned {names}, which Dag "
                f"{self.dag.dag_id!r} has no task or task group of; "
                + (f"it can follow {choices}" if choices else "it has no task downstream")
            )
        return Follow(task_ids=ids)

    def choices(self) -> list[str]:
        """The ids it can follow: the tasks directly downstream and the task groups they
        are in (but the groups the branch itself is in), sorted."""
        own = set(self.task_group.chain) if self.task_group is not None else set()
        found = set(self.downstream_task_ids)
        for task_id in self.downstream_task_ids:
            group = self.dag.task_dict[task_id].task_group
            found.update(set(group.chain) - own if group is not None else ())
        return sorted(found)


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
