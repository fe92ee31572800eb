"""What the Dag processor stores about assets: the assets each Dag references (in its
schedule or its tasks' outlets), which of them are active, and the wake requests a
change of schedule or an asset that becomes active calls for."""

from __future__ import annotations

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from spawnflow.models.asset_events import OUTLET, SCHEDULE, asset_for
from spawnflow.models.assets import AssetModel, AssetWakeRequest, DagAssetReference
from spawnflow.models.dag import DagModel
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
