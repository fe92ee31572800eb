"""Assets: data that Dags produce and consume, the events that say it changed, and
the runs that wait for them.

An event reaches each Dag scheduled on its asset as a *key log* row
(:class:`PendingAssetEvent`) of that Dag's *pending run* (:class:`PendingAssetRun`,
one per Dag and target partition). Every key log row written, by any writer, adds a
*wake request* (:class:`AssetWakeRequest`) in the same transaction: the scheduler
evaluates a pending run only when a request names it (or its Dag), so runs that wait
by design cost nothing per loop. Requests have no foreign key and no unique key and
are never updated: writing one never waits on the scheduler's locks.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    event,
    insert,
)
from sqlalchemy.orm import Mapped, mapped_column

from spawnflow.models.base import Base, Identifier
from spawnflow.models.dag import LongText
from spawnflow.models.job import utcnow
from spawnflow.sdk.partitions import MAX_PARTITION_KEY_LENGTH

#: The longest asset URI (an index would not hold it: rows are found by its hash).
MAX_URI_LENGTH = 1500


def uri_hash(uri: str) -> str:
    """The key an asset is found by: sha256 of its URI."""
    return hashlib.sha256(uri.encode()).hexdigest()


class AssetModel(Base):
    """An asset some Dag references, in its schedule or in a task's outlets."""

    __tablename__ = "asset"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uri: Mapped[str] = mapped_column(String(MAX_URI_LENGTH))
    uri_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(MAX_URI_LENGTH))
    group: Mapped[str] = mapped_column("asset_group", String(250), default="asset")
    #: Referenced by a Dag that is present (the Dag processor keeps it up to date).
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DagAssetReference(Base):
    """Dag ``dag_id`` references asset ``asset_id``: in its schedule (``role`` is
    ``schedule``: it consumes it) or in a task's outlets (``outlet``: it produces it)."""

    __tablename__ = "dag_asset_reference"

    dag_id: Mapped[str] = mapped_column(
        Identifier, ForeignKey("dag.dag_id", ondelete="CASCADE"), primary_key=True
    )
    asset_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("asset.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(String(20), primary_key=True)


class DagAssetWatcher(Base):
    """Dag ``dag_id`` declares watcher ``name`` of asset ``asset_id``: a trigger (its
    class and JSON keyword arguments) whose events are the asset's. The Dag processor
    keeps one trigger row per watcher of an active asset from these rows."""

    __tablename__ = "dag_asset_watcher"

    dag_id: Mapped[str] = mapped_column(
        Identifier, ForeignKey("dag.dag_id", ondelete="CASCADE"), primary_key=True
    )
    asset_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("asset.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(Identifier, primary_key=True)
    classpath: Mapped[str] = mapped_column(String(1000))
    kwargs: Mapped[str] = mapped_column(LongText)


class AssetEvent(Base):
    """An asset was updated: by a task that lists it in its outlets, or from outside."""

    __tablename__ = "asset_event"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    asset_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("asset.id", ondelete="CASCADE"), index=True
    )
    partition_key: Mapped[str | None] = mapped_column(String(MAX_PARTITION_KEY_LENGTH))
    #: JSON object the producer attached.
    extra: Mapped[str] = mapped_column(Text, default="{}")
    source_dag_id: Mapped[str | None] = mapped_column(Identifier)
    source_run_id: Mapped[str | None] = mapped_column(Identifier)
    source_task_id: Mapped[str | None] = mapped_column(Identifier)
    timestamp: Mapped[dt.datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, index=True
    )
    #: The id an asset watcher's trigger runner gave the event: one written again (its
    #: COMMIT's answer lost) is recognised and not recorded twice.
    trigger_event: Mapped[str | None] = mapped_column(String(32), unique=True)


class PendingAssetRun(Base):
    """A run of ``dag_id`` for ``partition_key`` waiting until its inputs have arrived
    (``""`` for a Dag that is not partitioned)."""

    __tablename__ = "pending_asset_run"
    __table_args__ = (UniqueConstraint("dag_id", "partition_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(Identifier, ForeignKey("dag.dag_id", ondelete="CASCADE"))
    partition_key: Mapped[str] = mapped_column(String(MAX_PARTITION_KEY_LENGTH), default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PendingAssetEvent(Base):
    """Key log: the pending run ``pending_run_id`` has seen event ``asset_event_id``."""

    __tablename__ = "pending_asset_event"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: No foreign key: a writer never waits on the scheduler's lock of the pending run.
    #: A row written as the scheduler fires and deletes that run outlives it; its wake
    #: request makes the scheduler move it to the Dag's next pending run for the partition.
    pending_run_id: Mapped[int] = mapped_column(Integer, index=True)
    #: The pending run's Dag and partition (the wake request names the Dag; a row whose
    #: run is gone is moved by them).
    dag_id: Mapped[str] = mapped_column(Identifier)
    partition_key: Mapped[str] = mapped_column(String(MAX_PARTITION_KEY_LENGTH), default="")
    asset_id: Mapped[int] = mapped_column(Integer)
    asset_event_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("asset_event.id", ondelete="CASCADE")
    )
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PendingAssetMapping(Base):
    """An event of ``asset_id`` that counts for a run of ``dag_id`` once the Dag's
    :class:`~spawnflow.sdk.partitions.CustomMapper` maps ``partition_key``: user code,
    which only the Dag processor's file parser runs. Written with the event; the Dag
    processor parses the Dag's file, writes the key log, and deletes the row."""

    __tablename__ = "pending_asset_mapping"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(Identifier, index=True)
    asset_id: Mapped[int] = mapped_column(Integer)
    asset_event_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("asset_event.id", ondelete="CASCADE")
    )
    #: The event's own partition key, which the mapper maps.
    partition_key: Mapped[str] = mapped_column(String(MAX_PARTITION_KEY_LENGTH))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AssetWakeRequest(Base):
    """Evaluate pending run ``pending_run_id`` (None: every pending run of ``dag_id``)."""

    __tablename__ = "asset_wake_request"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pending_run_id: Mapped[int | None] = mapped_column(Integer)
    dag_id: Mapped[str] = mapped_column(Identifier)
    #: ``event``, ``schedule changed``, ``asset active``…
    reason: Mapped[str] = mapped_column(String(50))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DagRunAssetEvent(Base):
    """Run ``dag_run_id`` was triggered by event ``asset_event_id``."""

    __tablename__ = "dag_run_asset_event"

    dag_run_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("dag_run.id", ondelete="CASCADE"), primary_key=True
    )
    asset_event_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("asset_event.id", ondelete="CASCADE"), primary_key=True
    )


@event.listens_for(PendingAssetEvent, "after_insert")
def _wake_the_scheduler(_mapper: Any, connection: Any, row: PendingAssetEvent) -> None:
    # In the writer's own transaction, whoever the writer is: a key log row that
    # commits always has its request, and one rolled back takes its request along.
    connection.execute(
        insert(AssetWakeRequest).values(
            pending_run_id=row.pending_run_id, dag_id=row.dag_id, reason="event",
            created_at=utcnow(),
        )
    )  # fmt: skip
