"""What Dag authors import: ``from spawnflow import Dag, dag, task, CommandTask``."""

from spawnflow.sdk.dags import Dag, dag
from spawnflow.sdk.tasks import (
    CommandTask,
    DagDefinitionError,
    PythonTask,
    Task,
    TriggerRule,
    XComArg,
    task,
)

__all__ = [
    "CommandTask",
    "Dag",
    "DagDefinitionError",
    "PythonTask",
    "Task",
    "TriggerRule",
    "XComArg",
    "dag",
    "task",
]
