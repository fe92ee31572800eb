"""SQLAlchemy tables and the Alembic migrations that create them.

Only processes marked (DB) in the design import this package.
"""

from spawnflow.models.assets import (
    AssetEvent,
    AssetModel,
    AssetWakeRequest,
    DagAssetReference,
    DagRunAssetEvent,
    PendingAssetEvent,
    PendingAssetMapping,
    PendingAssetRun,
)
from spawnflow.models.base import Base
from spawnflow.models.dag import DagFileModel, DagModel, ImportErrorModel, SerializedDagModel
from spawnflow.models.job import Job
from spawnflow.models.run import DagRun, TaskInstance, Variable, XCom

__all__ = [
    "AssetEvent",
    "AssetModel",
    "AssetWakeRequest",
    "Base",
    "DagAssetReference",
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
    "Variable",
    "XCom",
]
