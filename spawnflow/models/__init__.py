"""SQLAlchemy tables and the Alembic migrations that create them.

Only processes marked (DB) in the design import this package. Importing it loads no
table: the first name taken from it (``from spawnflow.models import Base``) loads every
model, so that ``Base.metadata`` holds every table, while a command that needs only
:mod:`spawnflow.models.schema` or :mod:`spawnflow.models.views` pays for neither the
ORM nor the declarative models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from spawnflow.models.backfill import Backfill
    from spawnflow.models.base import Base
    from spawnflow.models.dag import DagFileModel, DagModel, ImportErrorModel, SerializedDagModel
    from spawnflow.models.job import Job
    from spawnflow.models.pool import Pool
    from spawnflow.models.run import DagRun, TaskInstance, Variable, XCom
    from spawnflow.models.triggers import AssetStateValue, TaskStateValue, Trigger

#: The modules that define tables, loaded together on the first name asked for.
_TABLE_MODULES = ("assets", "backfill", "base", "dag", "job", "pool", "run", "triggers")

__all__ = [
    "AssetEvent",
    "AssetModel",
    "AssetStateValue",
    "AssetWakeRequest",
    "Backfill",
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
    "Pool",
    "SerializedDagModel",
    "TaskInstance",
    "TaskStateValue",
    "Trigger",
    "Variable",
    "XCom",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    modules = [importlib.import_module(f"{__name__}.{module}") for module in _TABLE_MODULES]
    found = next(vars(module)[name] for module in modules if name in vars(module))
    globals()[name] = found
    return found
