"""SQLAlchemy tables and the Alembic migrations that create them.

Only processes marked (DB) in the design import this package.
"""

from spawnflow.models.assets import (
    AssetEvent,
    AssetModel,
    AssetWakeRequest,
    DagAssetReference,
    DagAssetWatcher,
    DagRunAssetEvent,
    PendingAssetEvent,
    PendingAssetMapping,
    PendingAssetRun,
)
from spawnflow.models.base import Base
from spawnflow.models.dag import DagFileModel, DagModel, ImportErrorModel, SerializedDagModel
from spawnflow.models.job import Job
from spawnflow.models.run import DagRun, TaskInstance, Variable, XCom
from spawnflow.models.triggers import AssetStateValue, TaskStateValue, Trigger

__all__ = [
    "AssetEvent",
    "AssetModel",
    "AssetStateValue",
    "AssetWakeRequest",
    "Base",
    "DagAssetReference",
    "DagAssetWatcher",
    "DagFileModel",
    "DagModel",
    "DagRun",
    "DagRunAssetEvent",
    "ImportErrorModel",
    "Job",
    "PendingAssetEvent",
    "PendingAssetMapping",
    "PendingAssetRun",
    "SerializedDagModel",
    "TaskInstance",
    "TaskStateValue",
    "Trigger",
    "Variable",
    "XCom",
]
