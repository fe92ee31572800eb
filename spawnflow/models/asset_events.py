"""Writing asset events and the key logs they add to pending runs.

Every writer goes through :func:`record_event`: a task that lists the asset in its
outlets (in the same transaction as its success), and ``spawnflow assets event``. The
key log rows it adds make their wake requests themselves (see
:mod:`spawnflow.models.assets`).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from spawnflow.bootstrap import logs
from spawnflow.models.assets import (
    AssetEvent,
    AssetModel,
    DagAssetReference,
    PendingAssetEvent,
    PendingAssetMapping,
    PendingAssetRun,
    uri_hash,
)
from spawnflow.models.dag import SerializedDagModel
from spawnflow.sdk import serialize
from spawnflow.sdk.partitions import Custom
from spawnflow.sdk.schedule import zone_from_name

#: ``role`` of a Dag's reference to an asset it is scheduled on.
SCHEDULE, OUTLET = "schedule", "outlet"


def find_asset(session: Session, uri: str) -> AssetModel | None:
    return session.scalar(select(AssetModel).where(AssetModel.uri_hash == uri_hash(uri)))


def asset_for(
    session: Session, uri: str, name: str | None = None, group: str = "asset"
) -> AssetModel:
    """The asset row of ``uri``, made if it is new (another writer racing us wins)."""
    found = find_asset(session, uri)
    if found is not None:
        return found
    try:
        with session.begin_nested():
            asset = AssetModel(uri=uri, uri_hash=uri_hash(uri), name=name or uri, group=group)
            session.add(asset)
        return asset
    except IntegrityError:
        found = find_asset(session, uri)
        assert found is not None  # the row that made ours fail
        return found


def record_event(
    session: Session, asset: AssetModel, *, partition_key: str | None = None,
    extra: dict[str, Any] | None = None, source: tuple[str, str, str] | None = None,
    trigger_event: str | None = None,
) -> AssetEvent:  # fmt: skip
    """Record that ``asset`` was updated, and tell every Dag scheduled on it: each gets
    a key log row on its pending run (made if it has none), which wakes the scheduler;
    a Dag whose mapper of the asset is a CustomMapper gets a PendingAssetMapping row
    instead, for the Dag processor to map.

    ``source`` is the producing (dag_id, run_id, task_id), if a task produced it;
    ``trigger_event`` the id an asset watcher's runner gave the event.
    """
    dag_id, run_id, task_id = source or (None, None, None)
    event = AssetEvent(
        asset_id=asset.id, partition_key=partition_key, extra=json.dumps(extra or {}),
        source_dag_id=dag_id, source_run_id=run_id, source_task_id=task_id,
        trigger_event=trigger_event,
    )  # fmt: skip
    session.add(event)
    session.flush()
    consumers = session.scalars(
        select(DagAssetReference.dag_id).where(
            DagAssetReference.asset_id == asset.id, DagAssetReference.role == SCHEDULE
        )
    ).all()
    for consumer in consumers:
        target = _target(session, consumer, asset.uri, partition_key)
        if target is CUSTOM:
            assert partition_key is not None  # a key the Dag's own mapper will map
            session.add(PendingAssetMapping(
                dag_id=consumer, asset_id=asset.id, asset_event_id=event.id,
                partition_key=partition_key,
            ))  # fmt: skip
        elif isinstance(target, str):
            add_to_pending_run(session, consumer, target, asset.id, event.id)
    session.flush()
    return event


def add_to_pending_run(
    session: Session, dag_id: str, target: str, asset_id: int, event_id: int
) -> None:
    """Log event ``event_id`` on ``dag_id``'s pending run for partition ``target``."""
    pending = pending_run_for(session, dag_id, target)
    session.add(PendingAssetEvent(
        pending_run_id=pending.id, dag_id=dag_id, partition_key=target,
        asset_id=asset_id, asset_event_id=event_id,
    ))  # fmt: skip


#: What :func:`_target` returns for a Dag whose mapper of the asset is user code.
CUSTOM = object()


def _target(
    session: Session, dag_id: str, uri: str, partition_key: str | None
) -> str | object | None:
    """The partition of ``dag_id``'s run that an event of ``uri`` counts for: ``""``
    for a Dag that is not partition-driven; None if it counts for none (an event without
    a partition, or with a key the Dag's mapper for ``uri`` cannot read); CUSTOM if
    the Dag's own mapper must say (see :class:`PendingAssetMapping`)."""
    data = session.scalar(
        select(SerializedDagModel.data).where(SerializedDagModel.dag_id == dag_id)
    )
    if data is None:
        return None
    dag = serialize.decode(data).dag
    mappers = dag.schedule.partition_mappers
    if not mappers:
        return ""
    mapper = mappers.get(uri)
    if partition_key is None or mapper is None:
        return None
    if isinstance(mapper, Custom):
        return CUSTOM
    try:
        return mapper.target(partition_key, zone_from_name(dag.timezone))
    except ValueError as error:
        unmapped(dag_id, uri, partition_key, str(error))
        return None


def unmapped(dag_id: str, uri: str, partition_key: str, error: str) -> None:
    """Say that an event of ``uri`` with ``partition_key`` counts for no run of ``dag_id``."""
    logs.get_logger("spawnflow.assets").warning(
        "an asset event's partition counts for no run of a Dag", dag_id=dag_id, uri=uri,
        partition_key=partition_key, error=error,
    )  # fmt: skip


def pending_run_for(session: Session, dag_id: str, partition_key: str) -> PendingAssetRun:
    """The pending run of ``dag_id`` for ``partition_key``, made if it has none (a writer
    racing us to make it wins)."""
    query = select(PendingAssetRun).where(
        PendingAssetRun.dag_id == dag_id, PendingAssetRun.partition_key == partition_key
    )
    found = session.scalar(query)
    if found is not None:
        return found
    try:
        with session.begin_nested():
            pending = PendingAssetRun(dag_id=dag_id, partition_key=partition_key)
            session.add(pending)
        return pending
    except IntegrityError:  # another writer made it meanwhile
        found = session.scalar(query)
        assert found is not None
        return found
