"""What the ``spawnflow dags`` commands read and change, without click.

Everything here reads what the Dag processor stored; nothing imports a Dag file
(``dags check`` parses and runs one in child processes: :mod:`.dag_check`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError
from spawnflow.models.dag import DagFileModel, DagModel, ImportErrorModel, SerializedDagModel
from spawnflow.sdk import serialize


class UnknownDag(UserError):
    """A Dag id the Dag processor has not stored."""


def get_dag(dag_id: str) -> tuple[DagModel, serialize.SerializedDag]:
    """The stored Dag and its serialized document; UnknownDag if there is none."""
    with orm.session_scope() as session:
        model = session.get(DagModel, dag_id)
        stored = session.get(SerializedDagModel, dag_id)
        if model is None or stored is None:
            raise UnknownDag(_missing(session, dag_id))
        return model, serialize.decode(stored.data).dag


def _missing(session, dag_id: str) -> str:
    """Why ``dag_id`` is not there: its file does not import, or a typo (did you mean)."""
    broken = _broken_file_that_may_define(session, dag_id)
    if broken is not None:
        return broken
    return _unknown(dag_id, session.scalars(select(DagModel.dag_id)).all())


def _broken_file_that_may_define(session, dag_id: str) -> str | None:
    """The sentence for a Dag that is missing because its file does not import: a file
    with an import error that is named after the Dag or spells its id in quotes."""
    from pathlib import Path

    for error in session.scalars(select(ImportErrorModel).order_by(ImportErrorModel.fileloc)):
        path = Path(error.fileloc)
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            source = ""
        quoted = f'"{dag_id}"' in source or f"'{dag_id}'" in source
        if path.stem == dag_id or quoted:
            last = error.error.strip().splitlines()[-1] if error.error.strip() else "an error"
            return (
                f"there is no Dag {dag_id!r}: {path}, which may define it, does not import "
                f"({last}); see `spawnflow dags list-import-errors`"
            )
    return None


def _unknown(dag_id: str, known: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches(dag_id, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "; see `spawnflow dags list`"
    return f"there is no Dag {dag_id!r}{hint}"


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
            raise UnknownDag(_missing(session, dag_id))
        changed = model.is_paused != paused
        model.is_paused = paused
        return changed
