"""Which Dag is being built, and which Dags a file built: the SDK's import-time state.

Tasks join the Dag whose ``with`` block (or ``@dag`` function) is running; the file
parser collects every Dag a file built. Kept apart from :mod:`spawnflow.sdk.dags` and
:mod:`spawnflow.sdk.tasks`, which both need it, so that neither imports the other back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spawnflow.sdk.dags import Dag
    from spawnflow.sdk.groups import TaskGroup

_context: list[Dag] = []
#: The task groups whose ``with`` blocks are running, innermost last.
_groups: list[TaskGroup] = []
#: Every Dag built in this process, in order (the file parser reads it after an import).
_built: list[Dag] = []


def current_dag() -> Dag | None:
    """The Dag whose ``with`` block or @dag function is running, if any."""
    return _context[-1] if _context else None


def enter(dag: Dag) -> None:
    _context.append(dag)


def leave() -> None:
    _context.pop()


def current_group() -> TaskGroup | None:
    """The task group whose ``with`` block (or @task_group function) is running, if any."""
    return _groups[-1] if _groups else None


def enter_group(group: TaskGroup) -> None:
    _groups.append(group)


def leave_group() -> None:
    _groups.pop()


def record(dag: Dag) -> None:
    _built.append(dag)


def built_dags() -> list[Dag]:
    """The Dags built in this process so far."""
    return list(_built)


def forget_built_dags() -> None:
    """Start a new collection (the file parser calls this before importing a file)."""
    _built.clear()
