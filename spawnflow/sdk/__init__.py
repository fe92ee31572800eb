"""What Dag authors import: ``from spawnflow import Dag, dag, task, CommandTask``."""

from spawnflow.sdk.assets import Asset
from spawnflow.sdk.branching import BranchTask, ShortCircuitTask
from spawnflow.sdk.connections import Connection
from spawnflow.sdk.dags import Dag, dag
from spawnflow.sdk.groups import TaskGroup, task_group
from spawnflow.sdk.mapping import Partial, TaskFunction, TaskPartial
from spawnflow.sdk.partitions import CustomMapper, DayToMonth, DayToWeek, HourToDay, Identity
from spawnflow.sdk.runtime import (
    Variable,
    get_current_context,
    xcom_pull,
    xcom_pull_async,
    xcom_push,
    xcom_push_async,
)
from spawnflow.sdk.sensors import BaseSensor, DateTimeSensorAsync, FileSensor, SensorTimeout
from spawnflow.sdk.state import StateStore, StateStoreBackend
from spawnflow.sdk.tasks import (
    CommandTask,
    DagDefinitionError,
    PythonTask,
    Task,
    TriggerRule,
    WeightRule,
    XComArg,
    task,
)
from spawnflow.sdk.triggers import (
    AssetWatcher,
    BaseTrigger,
    DateTimeTrigger,
    FileTrigger,
    TaskDeferred,
    TimeDeltaTrigger,
    TriggerEvent,
)
from spawnflow.sdk.xcom_backend import XComBackend, XComRef

__all__ = [
    "Asset",
    "AssetWatcher",
    "BaseSensor",
    "BaseTrigger",
    "BranchTask",
    "CommandTask",
    "Connection",
    "CustomMapper",
    "Dag",
    "DagDefinitionError",
    "DateTimeSensorAsync",
    "DateTimeTrigger",
    "DayToMonth",
    "DayToWeek",
    "FileSensor",
    "FileTrigger",
    "HourToDay",
    "Identity",
    "Partial",
    "PythonTask",
    "SensorTimeout",
    "ShortCircuitTask",
    "StateStore",
    "StateStoreBackend",
    "Task",
    "TaskDeferred",
    "TaskFunction",
    "TaskGroup",
    "TaskPartial",
    "TimeDeltaTrigger",
    "TriggerEvent",
    "TriggerRule",
    "Variable",
    "WeightRule",
    "XComArg",
    "XComBackend",
    "XComRef",
    "dag",
    "get_current_context",
    "task",
    "task_group",
    "xcom_pull",
    "xcom_pull_async",
    "xcom_push",
    "xcom_push_async",
]
