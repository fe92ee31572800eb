"""SQLAlchemy tables and the Alembic migrations that create them.

Only processes marked (DB) in the design import this package.
"""

from spawnflow.models.base import Base
from spawnflow.models.dag import DagFileModel, DagModel, ImportErrorModel, SerializedDagModel
from spawnflow.models.job import Job
from spawnflow.models.run import DagRun, TaskInstance, Variable, XCom

__all__ = [
    "Base",
    "DagFileModel",
    "DagModel",
    "DagRun",
    "ImportErrorModel",
    "Job",
    "SerializedDagModel",
    "TaskInstance",
    "Variable",
    "XCom",
]
