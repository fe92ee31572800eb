"""Task groups: tasks gathered under one name, with dependencies on the whole group.

``with TaskGroup("extract"):`` prefixes the id of every task created inside it with
the group's id (``extract.load``); groups nest (``extract.clean.dedupe``). A group on
either side of ``>>`` stands for its edge tasks: ``group >> task`` makes ``task``
wait for the group's leaves (its tasks with no downstream task inside it), and
``task >> group`` makes the group's roots wait for ``task``. The group is a way of
writing and showing the Dag: the scheduler sees the prefixed tasks only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spawnflow.sdk import building
from spawnflow.sdk.names import check_id
from spawnflow.sdk.tasks import DagDefinitionError, Linked, Task

if TYPE_CHECKING:
    from spawnflow.sdk.dags import Dag


class TaskGroup(Linked):
    """A named group of tasks (and groups) in a Dag, used as a context manager.

    Args:
        group_id: the group's name: letters, digits, ``_``, ``-`` and ``.``. Inside
            another group it is prefixed with that group's id.
        prefix_group_id: prefix the ids of the tasks inside with the group's id
            (default True, as in Airflow).
        dag: the Dag; by default the one being built.
        tooltip: one line that says what the group does.

    Raises:
        DagDefinitionError: outside a Dag, for a bad id, or for a group id used twice.
    """

    def __init__(self, group_id: str, *, prefix_group_id: bool = True,
                 dag: Dag | None = None, tooltip: str = ""):  # fmt: skip
        found = dag or building.current_dag()
        if found is None:
            raise DagDefinitionError(
                f"task group {group_id!r} was created outside a Dag: create it inside "
                "`with Dag(...)`, inside a @dag function, or pass dag=..."
            )
        self.dag: Dag = found
        parent = building.current_group()
        self.parent = parent if parent is not None and parent.dag is self.dag else None
        try:
            check_id(group_id, "task group id")
        except ValueError as error:
            raise self.dag.definition_error(str(error)) from None
        self.group_id = self.parent.child_id(group_id) if self.parent else group_id
        taken = self.dag.task_groups
        if self.group_id in taken or self.group_id in self.dag.task_dict:
            raise self.dag.definition_error(
                f"task group id {self.group_id!r} is already used by a task or a group"
            )
        taken[self.group_id] = self
        self.prefix_group_id = prefix_group_id
        self.tooltip = tooltip
        #: The tasks and groups created directly inside it, in order.
        self.children: list[Task | TaskGroup] = []
        if self.parent is not None:
            self.parent.children.append(self)

    def __repr__(self) -> str:
        return f"<TaskGroup {self.group_id}: {len(self.tasks)} tasks>"

    def __enter__(self) -> TaskGroup:
        building.enter_group(self)
        return self

    def __exit__(self, kind, error, traceback) -> None:
        building.leave_group()

    def child_id(self, name: str) -> str:
        """The id of a task or group named ``name`` inside this group."""
        if not self.prefix_group_id:
            return self.parent.child_id(name) if self.parent else name
        return f"{self.group_id}.{name}"

    def add(self, task: Task) -> None:
        """A task created inside this group (Task's constructor calls it)."""
        self.children.append(task)

    # -- the group as a whole -------------------------------------------------------------

    @property
    def tasks(self) -> list[Task]:
        """Every task in the group, those of nested groups too, in creation order."""
        found: list[Task] = []
        for child in self.children:
            found.extend(child.tasks if isinstance(child, TaskGroup) else [child])
        return found

    @property
    def chain(self) -> list[str]:
        """The ids of the groups it is in, outermost first, ending with its own."""
        return [*(self.parent.chain if self.parent else []), self.group_id]

    def edge_tasks(self, *, roots: bool) -> list[Task]:
        """Its roots (no upstream task inside the group) or its leaves (no downstream
        task inside the group): what a dependency on the whole group is on."""
        inside = {task.task_id for task in self.tasks}
        edge = []
        for task in self.tasks:
            linked = task.upstream_task_ids if roots else task.downstream_task_ids
            if not linked & inside:
                edge.append(task)
        if not edge:
            raise self.dag.definition_error(
                f"task group {self.group_id!r} has no tasks to depend on (yet): "
                "set dependencies on it after creating its tasks"
            )
        return edge

    def set_downstream(self, other: Any) -> None:
        for leaf in self.edge_tasks(roots=False):
            leaf.set_downstream(other)

    def set_upstream(self, other: Any) -> None:
        for root in self.edge_tasks(roots=True):
            root.set_upstream(other)


def task_group(group_id: str | Callable[..., Any] | None = None, **options: Any):
    """Decorate a function that creates tasks; each call creates them in a new
    :class:`TaskGroup` and returns the group (``extract() >> load``).

    ``@task_group`` or ``@task_group(group_id="extract", ...)``; the group id defaults
    to the function's name, with ``__1``, ``__2``... when it is called again.
    """

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def build(*args: Any, **kwargs: Any) -> Any:
            group = TaskGroup(_free_group_id(name or function.__name__), **options)
            with group:
                function(*args, **kwargs)
            return group

        return build

    if callable(group_id):
        name = None
        return decorate(group_id)
    name = group_id
    return decorate


def _free_group_id(name: str) -> str:
    """``name``, or ``name__1``, ``name__2``... when a @task_group function is called again."""
    dag = building.current_dag()
    parent = building.current_group()
    full = parent.child_id if parent is not None and parent.dag is dag else str
    if dag is None or full(name) not in dag.task_groups:
        return name
    number = 1
    while full(f"{name}__{number}") in dag.task_groups:
        number += 1
    return f"{name}__{number}"
