"""Assets for commands: list them, show one, list its events, record an event."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError
from spawnflow.models import asset_events
from spawnflow.models.assets import (
    AssetEvent,
    AssetModel,
    DagAssetReference,
)
from spawnflow.sdk.partitions import MAX_PARTITION_KEY_LENGTH
from spawnflow.services.records import NotFound


@dataclass
class AssetSummary:
    """One asset as ``spawnflow assets list`` and ``show`` print it."""

    uri: str
    name: str
    group: str
    active: bool
    consumers: list[str]
    producers: list[str]
    events: int


def list_assets() -> list[AssetSummary]:
    """Every asset a Dag references or an event named, by URI."""
    with orm.session_scope(write=False) as session:
        assets = session.scalars(select(AssetModel).order_by(AssetModel.uri)).all()
        return [_summary(session, asset) for asset in assets]


def show_asset(uri: str) -> AssetSummary:
    with orm.session_scope(write=False) as session:
        return _summary(session, _known(session, uri))


def list_events(uri: str, limit: int = 50) -> list[AssetEvent]:
    """The newest ``limit`` events of ``uri``, newest first."""
    with orm.session_scope(write=False) as session:
        asset = _known(session, uri)
        return list(session.scalars(
            select(AssetEvent).where(AssetEvent.asset_id == asset.id)
            .order_by(AssetEvent.timestamp.desc(), AssetEvent.id.desc()).limit(limit)
        ))  # fmt: skip


def record_event(uri: str, partition_key: str | None, extra: str | None) -> AssetEvent:
    """Record that ``uri`` was updated outside spawnflow (``--extra``: a JSON object)."""
    payload: dict[str, Any] = {}
    if extra is not None:
        try:
            payload = json.loads(extra)
        except json.JSONDecodeError as error:
            raise UserError(f"--extra {extra!r} is not JSON: {error}") from None
        if not isinstance(payload, dict):
            raise UserError(f"--extra {extra!r} must be a JSON object")
    if partition_key is not None and not 0 < len(partition_key) <= MAX_PARTITION_KEY_LENGTH:
        raise UserError(f"--partition must be 1 to {MAX_PARTITION_KEY_LENGTH} characters long")
    with orm.session_scope() as session:
        asset = _known(session, uri)
        return asset_events.record_event(session, asset, partition_key=partition_key, extra=payload)


def _known(session: Any, uri: str) -> AssetModel:
    asset = asset_events.find_asset(session, uri)
    if asset is None:
        raise NotFound(
            f"no asset {uri!r} is known: a Dag must reference it (in its schedule or a "
            "task's outlets) and be parsed first; see `spawnflow assets list`"
        )
    return asset


def _summary(session: Any, asset: AssetModel) -> AssetSummary:
    references = session.execute(
        select(DagAssetReference.dag_id, DagAssetReference.role)
        .where(DagAssetReference.asset_id == asset.id)
        .order_by(DagAssetReference.dag_id)
    ).all()
    events = session.scalar(select(func.count()).where(AssetEvent.asset_id == asset.id))
    return AssetSummary(
        uri=asset.uri, name=asset.name, group=asset.group, active=asset.is_active,
        consumers=[d for d, role in references if role == asset_events.SCHEDULE],
        producers=[d for d, role in references if role == asset_events.OUTLET],
        events=events or 0,
    )  # fmt: skip
