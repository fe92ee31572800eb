"""What the Dag processor stores about assets: the assets each Dag references (in its
schedule or its tasks' outlets), which of them are active, the wake requests a change
of schedule or an asset that becomes active calls for, and the trigger rows of the
asset watchers that active Dags declare."""

from __future__ import annotations

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from spawnflow.models.asset_events import OUTLET, SCHEDULE, asset_for
from spawnflow.models.assets import (
    AssetModel,
    AssetWakeRequest,
    DagAssetReference,
    DagAssetWatcher,
)
from spawnflow.models.dag import DagModel
from spawnflow.models.triggers import Trigger
from spawnflow.sdk.serialize import SerializedDag


def schedule_uris(dag: SerializedDag) -> list[str]:
    """The assets ``dag`` is scheduled on (none for a time schedule)."""
    condition = dag.schedule.assets
    return condition.uris() if dag.schedule.kind == "assets" and condition else []


def store_references(session: Session, dag: SerializedDag, before: SerializedDag | None) -> None:
    """Write ``dag``'s asset references (``before``: what was stored until now)."""
    ids = {}  # ``dag.assets`` lists every asset its schedule and outlets name
    for ref in dag.assets:
        asset = asset_for(session, ref.uri, ref.name, ref.group)
        asset.name, asset.group = ref.name, ref.group
        ids[ref.uri] = asset.id
    wanted = {(ids[uri], SCHEDULE) for uri in schedule_uris(dag)}
    wanted |= {(ids[uri], OUTLET) for task in dag.tasks for uri in task.outlets}
    existing = {
        (row.asset_id, row.role): row
        for row in session.scalars(
            select(DagAssetReference).where(DagAssetReference.dag_id == dag.dag_id)
        )
    }
    for key, row in existing.items():
        if key not in wanted:
            session.delete(row)
    for asset_id, role in wanted - set(existing):
        session.add(DagAssetReference(dag_id=dag.dag_id, asset_id=asset_id, role=role))
    _store_watchers(session, dag, ids)
    if dag.schedule.kind == "assets" and (before is None or before.schedule != dag.schedule):
        # What the pending runs wait for changed: each is evaluated again.
        session.add(AssetWakeRequest(dag_id=dag.dag_id, reason="schedule changed"))


def refresh_activity(session: Session) -> None:
    """Mark active the assets an active Dag references, and the others inactive; each
    Dag scheduled on an asset that became active is asked to evaluate its pending runs."""
    referenced = exists().where(
        DagAssetReference.asset_id == AssetModel.id,
        DagAssetReference.dag_id == DagModel.dag_id,
        DagModel.is_active.is_(True),
    )
    woken = session.scalars(
        select(AssetModel.id).where(AssetModel.is_active.is_(False), referenced)
    ).all()
    if woken:
        session.execute(update(AssetModel).where(AssetModel.id.in_(woken)).values(is_active=True))
        consumers = session.scalars(
            select(DagAssetReference.dag_id)
            .distinct()
            .where(DagAssetReference.asset_id.in_(woken), DagAssetReference.role == SCHEDULE)
        ).all()
        session.add_all(
            AssetWakeRequest(dag_id=dag_id, reason="asset active") for dag_id in consumers
        )
    session.execute(
        update(AssetModel)
        .where(AssetModel.is_active.is_(True), ~referenced)
        .values(is_active=False)
    )


def _store_watchers(session: Session, dag: SerializedDag, ids: dict[str, int]) -> None:
    """Write the asset watchers ``dag`` declares (its rows only)."""
    wanted = {
        (ids[ref.uri], watcher.name): watcher for ref in dag.assets for watcher in ref.watchers
    }
    for row in session.scalars(select(DagAssetWatcher).where(DagAssetWatcher.dag_id == dag.dag_id)):
        watcher = wanted.pop((row.asset_id, row.name), None)
        if watcher is None:
            session.delete(row)
        else:
            row.classpath, row.kwargs = watcher.classpath, watcher.kwargs
    for (asset_id, name), watcher in wanted.items():
        row = DagAssetWatcher(dag_id=dag.dag_id, asset_id=asset_id, name=name,
                              classpath=watcher.classpath, kwargs=watcher.kwargs)  # fmt: skip
        session.add(row)


def sync_watcher_triggers(session: Session) -> None:
    """One trigger row per watcher of an active asset that an active Dag declares (the
    first Dag by id, if two declare the same name); a changed watcher gets a new row, so
    the triggerer starts it again; a watcher nobody declares any more loses its row."""
    declared: dict[tuple[int, str], tuple[str, str]] = {}
    for row in session.scalars(
        select(DagAssetWatcher)
        .join(DagModel, DagModel.dag_id == DagAssetWatcher.dag_id)
        .join(AssetModel, AssetModel.id == DagAssetWatcher.asset_id)
        .where(DagModel.is_active.is_(True), AssetModel.is_active.is_(True))
        .order_by(DagAssetWatcher.dag_id)
    ):
        declared.setdefault((row.asset_id, row.name), (row.classpath, row.kwargs))
    for trigger in session.scalars(select(Trigger).where(Trigger.asset_id.is_not(None))):
        key = (trigger.asset_id or 0, trigger.watcher_name or "")  # the query asked for one
        if declared.get(key) == (trigger.classpath, trigger.kwargs):
            del declared[key]  # as declared: it runs on
        else:
            session.delete(trigger)
    session.flush()  # a changed watcher's old row is gone before its new one comes
    for (asset_id, name), (classpath, kwargs) in declared.items():
        session.add(Trigger(asset_id=asset_id, watcher_name=name, classpath=classpath,
                            kwargs=kwargs))  # fmt: skip
