"""What the ``spawnflow dags`` commands read and change, without click.

Everything here reads what the Dag processor stored; nothing imports a Dag file
(``dags check`` parses and runs one in child processes: :mod:`.dag_check`).
"""

from __future__ import annotations

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.models.dag import DagFileModel, DagModel, ImportErrorModel, SerializedDagModel
from spawnflow.sdk import serialize
from spawnflow.services.records import unknown_dag


def get_dag(dag_id: str) -> tuple[DagModel, serialize.SerializedDag]:
    """The stored Dag and its serialized document; :class:`~.records.UnknownDag` (with
    the likely cause: a file that does not import, or a typo) if there is none."""
    with orm.session_scope() as session:
        model = session.get(DagModel, dag_id)
        stored = session.get(SerializedDagModel, dag_id)
        if model is None or stored is None:
            raise unknown_dag(session, dag_id)
        return model, serialize.decode(stored.data).dag


def import_errors() -> list[ImportErrorModel]:
    with orm.session_scope() as session:
        return list(session.scalars(select(ImportErrorModel).order_by(ImportErrorModel.fileloc)))


def report() -> list[DagFileModel]:
    """Per-file parse statistics, slowest first."""
    with orm.session_scope() as session:
        query = select(DagFileModel).order_by(DagFileModel.duration.desc(), DagFileModel.fileloc)
        return list(session.scalars(query))


def set_paused(dag_id: str, paused: bool) -> bool:
    """Pause or unpause; returns whether the state changed."""
    with orm.session_scope() as session:
        model = session.get(DagModel, dag_id)
        if model is None:
            raise unknown_dag(session, dag_id)
        changed = model.is_paused != paused
        model.is_paused = paused
        return changed
