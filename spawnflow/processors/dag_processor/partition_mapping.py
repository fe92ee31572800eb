"""Asset events waiting for a Dag's own partition mapper.

A :class:`~spawnflow.sdk.partitions.CustomMapper` is user code, and user code never
runs in a process that holds the database (law 3): the writer of an event leaves a
:class:`~spawnflow.models.assets.PendingAssetMapping` row instead of a key log. Each
pass of the Dag processor parses the files of the Dags that have such rows (a file with
an import error waits for its next parse as usual), hands the parser the keys to map,
and writes the key logs of its answers in the transaction that stores the file's Dags.
Each row is answered by exactly one Dag processor: the one whose delete removed it.
"""

from __future__ import annotations

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from spawnflow.models.asset_events import add_to_pending_run, unmapped
from spawnflow.models.assets import AssetModel, PendingAssetMapping
from spawnflow.models.dag import DagModel, ImportErrorModel
from spawnflow.processors.dag_processor.messages import PartitionMapped

#: The most events one pass asks parsers to map; the others wait for the next pass.
PER_PASS = 5000


def requested(session: Session, limit: int = PER_PASS) -> dict[str, list[dict]]:
    """The partitions to map, oldest first, as MapPartition fields by Dag file.

    Those of Dags that are gone (deleted, or their file removed) are dropped: their
    events count for no run, as they would have if written after the Dag went.
    """
    session.execute(
        delete(PendingAssetMapping).where(
            ~exists().where(
                DagModel.dag_id == PendingAssetMapping.dag_id, DagModel.is_active.is_(True)
            )
        )
    )
    rows = session.execute(
        select(PendingAssetMapping.id, PendingAssetMapping.dag_id, AssetModel.uri,
               PendingAssetMapping.partition_key, DagModel.fileloc)
        .join(AssetModel, AssetModel.id == PendingAssetMapping.asset_id)
        .join(DagModel, DagModel.dag_id == PendingAssetMapping.dag_id)
        .order_by(PendingAssetMapping.id)
        .limit(limit)
    )  # fmt: skip
    by_file: dict[str, list[dict]] = {}
    for row_id, dag_id, uri, key, fileloc in rows:
        by_file.setdefault(fileloc, []).append(
            {"id": row_id, "dag_id": dag_id, "uri": uri, "key": key}
        )
    return by_file


def failing_files(session: Session) -> set[str]:
    """The Dag files whose last parse ended in an import error."""
    return set(session.scalars(select(ImportErrorModel.fileloc)))


def answer(session: Session, mapped: list[PartitionMapped]) -> int:
    """Write the key logs of a parser's answers (each makes its wake request) and
    delete the rows they answer; return how many events now count for a run."""
    if not mapped:
        return 0
    query = (
        select(PendingAssetMapping.id, PendingAssetMapping.dag_id, PendingAssetMapping.asset_id,
               PendingAssetMapping.asset_event_id, PendingAssetMapping.partition_key,
               AssetModel.uri)
        .join(AssetModel, AssetModel.id == PendingAssetMapping.asset_id)
        .where(PendingAssetMapping.id.in_([m.id for m in mapped]))
    )  # fmt: skip
    rows = {row.id: row for row in session.execute(query)}
    counted = 0
    for reply in mapped:
        row = rows.get(reply.id)
        if row is None:
            continue  # its Dag went meanwhile
        gone = session.execute(delete(PendingAssetMapping).where(PendingAssetMapping.id == row.id))
        if gone.rowcount == 0:  # type: ignore[attr-defined]
            continue  # another Dag processor answered it first
        if reply.target is None:
            unmapped(row.dag_id, row.uri, row.partition_key, reply.error or "no target")
            continue
        add_to_pending_run(session, row.dag_id, reply.target, row.asset_id, row.asset_event_id)
        counted += 1
    return counted
