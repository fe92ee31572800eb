"""SQLAlchemy tables and the Alembic migrations that create them.

Only processes marked (DB) in the design import this package.
"""

from spawnflow.models.base import Base
from spawnflow.models.dag import DagFileModel, DagModel, ImportErrorModel, SerializedDagModel
from spawnflow.models.job import Job

__all__ = ["Base", "DagFileModel", "DagModel", "ImportErrorModel", "Job", "SerializedDagModel"]
