"""What the Dag processor writes: one transaction per parsed file.

Dags, their serialized documents, import errors and parse statistics of a file
change together or not at all. A Dag whose document did not change is not
rewritten. A Dag id that another file already defines is an import error of the
newcomer that names both files; the file that had it first keeps it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from spawnflow.models.dag import (
    DagFileModel,
    DagModel,
    ImportErrorModel,
    SerializedDagModel,
    path_key,
)
from spawnflow.processors.dag_processor import asset_refs
from spawnflow.processors.dag_processor.messages import PartitionMapped
from spawnflow.sdk import serialize

OK, IMPORT_ERROR, TIMEOUT, CRASH = "ok", "import error", "timeout", "crash"
#: A parse the processor cut short because it was stopping; nothing is recorded.
STOPPED = "stopped"


@dataclass
class Outcome:
    """How parsing one file ended, as the manager saw it."""

    path: str
    kind: str
    duration: float
    file_hash: str = ""
    dags: list[serialize.SerializedDag] = field(default_factory=list)
    error: str | None = None
    #: The parser's peak resident memory, when it reported one.
    peak_rss: int | None = None
    #: Its answers to the partitions it was asked to map (see :mod:`.partition_mapping`).
    mapped: list[PartitionMapped] = field(default_factory=list)


@dataclass
class Recorded:
    """What :func:`record` stored for a file."""

    dags: list[str]
    error: str | None
    #: Some Dag ids were taken by another file (which may still give them up).
    conflict: bool


@dataclass
class FileRecord:
    """What the database says about a file the last time it was parsed."""

    content_hash: str
    last_parsed: dt.datetime


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def known_files(session: Session) -> dict[str, FileRecord]:
    """Every file the processor parsed before, by path."""
    rows = session.execute(
        select(DagFileModel.fileloc, DagFileModel.content_hash, DagFileModel.last_parsed)
    )
    return {path: FileRecord(content, _aware(parsed)) for path, content, parsed in rows}


def record(session: Session, outcome: Outcome, *, paused_at_creation: bool) -> Recorded:
    """Write what parsing one file found, in the caller's transaction."""
    now = utcnow()
    key = path_key(outcome.path)
    errors = [outcome.error] if outcome.error else []
    kept: list[serialize.SerializedDag] = []
    conflict = False
    if outcome.kind == OK:
        for dag in outcome.dags:
            owner = _other_owner(session, dag.dag_id, outcome.path)
            if owner is not None:
                conflict = True
                errors.append(f"Dag {dag.dag_id!r} in {outcome.path} is already defined in {owner}")
                continue
            kept.append(dag)
            _write_dag(session, dag, outcome.file_hash, now, paused_at_creation)
        _deactivate(session, DagModel.fileloc == outcome.path, keep={d.dag_id for d in kept})
    error = "\n\n".join(errors) or None
    _set_import_error(session, key, outcome.path, error, now)
    stats = session.get(DagFileModel, key) or DagFileModel(file_key=key, fileloc=outcome.path)
    stats.content_hash = outcome.file_hash or stats.content_hash or ""
    stats.last_parsed = now
    stats.duration = outcome.duration
    stats.dag_count = len(kept)
    stats.outcome = outcome.kind if outcome.kind != OK or not errors else IMPORT_ERROR
    session.add(stats)
    return Recorded([d.dag_id for d in kept], error, conflict)


def totals(session: Session, present: Iterable[str]) -> tuple[int, dict[str, str]]:
    """How many active Dags the present files define, and their import errors by path."""
    present = set(present)
    dags = session.scalars(select(DagModel.fileloc).where(DagModel.is_active.is_(True)))
    errors = session.execute(select(ImportErrorModel.fileloc, ImportErrorModel.error))
    return (
        sum(1 for path in dags if path in present),
        {path: error for path, error in errors if path in present},
    )


def forget_missing_files(
    session: Session, present: Iterable[str], keep_under: Path | None = None
) -> list[str]:
    """Deactivate the Dags of files that are gone and drop their errors and stats;
    files under ``keep_under`` (a Dags folder that is missing as a whole) stay.

    Returns the paths that were forgotten.
    """
    present = set(present)
    gone = [
        path for path in known_files(session)
        if path not in present and not (keep_under and Path(path).is_relative_to(keep_under))
    ]  # fmt: skip
    for path in gone:
        _deactivate(session, DagModel.fileloc == path, keep=set())
        key = path_key(path)
        for model in (ImportErrorModel, DagFileModel):
            row = session.get(model, key)
            if row is not None:
                session.delete(row)
    return gone


def _other_owner(session: Session, dag_id: str, path: str) -> str | None:
    """The other file that defines ``dag_id`` and still exists, if any."""
    row = session.get(DagModel, dag_id)
    if row is None or not row.is_active or row.fileloc == path:
        return None
    return row.fileloc


def _write_dag(
    session: Session, dag: serialize.SerializedDag, file_hash: str, now: dt.datetime,
    paused_at_creation: bool,
) -> bool:  # fmt: skip
    model = session.get(DagModel, dag.dag_id)
    if model is None:
        model = DagModel(dag_id=dag.dag_id, is_paused=paused_at_creation)
        session.add(model)
    model.fileloc = dag.fileloc
    model.is_active = True
    model.description = dag.description
    model.schedule = dag.schedule.describe()[:100]
    model.tags = json.dumps(dag.tags)
    model.max_active_runs = dag.max_active_runs
    model.max_active_tasks = dag.max_active_tasks
    model.last_parsed_time = now

    new_hash = serialize.dag_hash(dag)
    stored = session.get(SerializedDagModel, dag.dag_id)
    if stored is not None and stored.dag_hash == new_hash:
        return False  # unchanged: not rewritten
    asset_refs.store_references(session, dag, _readable(stored))
    document = serialize.DagDocument(version=serialize.VERSION, dag=dag, file_hash=file_hash)
    if stored is None:
        stored = SerializedDagModel(dag_id=dag.dag_id)
        session.add(stored)
    stored.data = serialize.encode(document).decode()
    stored.dag_hash = new_hash
    stored.last_updated = now
    return True


def _readable(stored: SerializedDagModel | None) -> serialize.SerializedDag | None:
    """The Dag a stored document holds; None if there is none it can read."""
    if stored is None:
        return None
    try:
        return serialize.decode(stored.data).dag
    except (ValueError, msgspec.ValidationError):
        return None


def _deactivate(session: Session, where, keep: set[str]) -> None:
    statement = update(DagModel).where(where, DagModel.is_active.is_(True))
    if keep:
        statement = statement.where(DagModel.dag_id.not_in(keep))
    session.execute(statement.values(is_active=False))


def _set_import_error(
    session: Session, key: str, path: str, error: str | None, now: dt.datetime
) -> None:
    row = session.get(ImportErrorModel, key)
    if error is None:
        if row is not None:
            session.delete(row)
        return
    if row is None:
        row = ImportErrorModel(file_key=key, fileloc=path)
        session.add(row)
    row.error = error
    row.timestamp = now


def _aware(moment: dt.datetime) -> dt.datetime:
    # SQLite and MySQL hand back naive datetimes; spawnflow stores UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)
