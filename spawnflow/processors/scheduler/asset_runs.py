"""Asset-triggered runs: evaluate the pending runs that wake requests name.

A pending run (one per Dag and target partition) collects key log rows as events
arrive; a request to evaluate it is written with each row. A scheduler loop reads the
oldest requests (one statement when there are none), claims the pending runs they
name, fires those whose Dag's asset condition the events seen satisfy, and deletes
exactly the requests it read: a request written meanwhile stays for the next loop.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row, Select, delete, exists, func, select, update
from sqlalchemy.orm import Session

from spawnflow.bootstrap import metrics
from spawnflow.comms.states import DagRunState, RunType
from spawnflow.models import asset_events
from spawnflow.models.assets import (
    AssetEvent,
    AssetModel,
    AssetWakeRequest,
    DagRunAssetEvent,
    PendingAssetEvent,
    PendingAssetRun,
)
from spawnflow.models.base import one_of
from spawnflow.models.dag import DagModel
from spawnflow.models.run import DagRun
from spawnflow.processors.scheduler.runs import DagBag, aware
from spawnflow.sdk.partitions import Mapper
from spawnflow.sdk.schedule import zone_from_name
from spawnflow.sdk.serialize import SerializedDag

#: How often a loop reads more requests when other schedulers hold runs it wanted.
REFILLS = 3


def evaluate_requested(
    session: Session, bag: DagBag, now: dt.datetime, budget: int,
    fanout: dict[str, tuple[int, int]] | None = None,
) -> int:  # fmt: skip
    """Answer wake requests, evaluating at most ``budget`` pending runs; runs created.

    The oldest ``budget`` requests are read (one statement when there are none), and
    the runs they name taken Dag by Dag in turn, each Dag's oldest request first, so
    that one busy Dag does not hold up the others. A request for a whole Dag fans out
    over its pending runs a share of the budget at a time: ``fanout`` holds where each
    fan-out got to (the caller keeps it across loops once the loop committed), and the
    request is answered when the fan-out reaches the end. Pending runs another
    scheduler holds are skipped, and the requests naming them kept for a later loop;
    the budget they leave is refilled from the next requests (up to :data:`REFILLS`
    times). A
    request whose pending run is gone (fired while its key log row was written) moves
    that row to the Dag's current pending run for the partition. Requests that were
    not read, or not reached, stay.
    """
    fanout = {} if fanout is None else fanout
    requests = session.execute(_oldest_requests(budget)).all()
    if not requests:  # requests of paused or stale Dags wait (see tidy_requests)
        return 0
    oldest = min(aware(r.created_at) for r in requests)
    metrics.timing("scheduler.asset_partitions.wake_lag", (now - oldest).total_seconds() * 1000)
    named, whole = _in_turn(requests, budget)
    chosen = dict.fromkeys(named.values())  # pending run ids, in the order taken
    fanned: dict[str, list[int]] = {}
    limits: dict[str, int] = {}
    left = budget - len(chosen)  # what the named runs left of the budget, shared
    share = max(1, left // max(1, len(whole)))
    for dag_id, request_ids in whole.items():
        if left <= 0:
            break  # the rest wait for a loop with budget left
        # A fan-out answers the requests there were when it began: one written since
        # starts its own fan-out, from the first pending run, afterwards.
        after, covered = fanout.get(dag_id, (0, max(request_ids)))
        fanout[dag_id], limits[dag_id] = (after, covered), min(share, left)
        fanned[dag_id] = list(session.scalars(
            select(PendingAssetRun.id)
            .where(PendingAssetRun.dag_id == dag_id, PendingAssetRun.id > after)
            .order_by(PendingAssetRun.id).limit(limits[dag_id])
        ))  # fmt: skip
        left -= len(fanned[dag_id])
        chosen.update(dict.fromkeys(fanned[dag_id]))
    existing, claimed = _claim(session, chosen)
    held = existing - set(claimed)  # by another scheduler
    last_read = requests[-1].id
    for _ in range(REFILLS):  # runs another scheduler holds leave budget: take more
        if not held or len(claimed) >= budget:
            break
        more = session.execute(
            _oldest_requests(budget - len(claimed)).where(
                AssetWakeRequest.id > last_read, AssetWakeRequest.pending_run_id.is_not(None)
            )
        ).all()
        if not more:
            break
        last_read = more[-1].id
        named.update({r.id: r.pending_run_id for r in more})
        found, taken = _claim(session, {r.pending_run_id for r in more} - existing)
        existing |= found
        claimed.update(taken)
        held = existing - set(claimed)
    gone = {run_id for run_id in named.values() if run_id not in existing}
    for run in _rehome(session, gone):
        claimed.setdefault(run.id, run)
    created = _evaluate_all(session, bag, [claimed[run_id] for run_id in sorted(claimed)], now)
    metrics.incr("scheduler.asset_partitions.evaluated", len(claimed))
    answered = [request_id for request_id, run_id in named.items() if run_id not in held]
    for dag_id, ids in fanned.items():
        after, covered = fanout[dag_id]
        if held.intersection(ids):
            continue  # the same stretch again next loop
        if len(ids) < limits[dag_id]:  # the fan-out reached the end
            answered += [request_id for request_id in whole[dag_id] if request_id <= covered]
            del fanout[dag_id]
        else:
            fanout[dag_id] = (ids[-1], covered)
    if answered:
        session.execute(
            delete(AssetWakeRequest).where(one_of(session, AssetWakeRequest.id, answered))
        )
    return created


def _oldest_requests(limit: int) -> Select:
    """The oldest ``limit`` requests of Dags that run (paused or stale Dags' wait)."""
    return (
        select(
            AssetWakeRequest.id, AssetWakeRequest.pending_run_id, AssetWakeRequest.dag_id,
            AssetWakeRequest.created_at,
        )
        .join(DagModel, DagModel.dag_id == AssetWakeRequest.dag_id)
        .where(DagModel.is_paused.is_(False), DagModel.is_active.is_(True))
        .order_by(AssetWakeRequest.id)
        .limit(limit)
    )  # fmt: skip


def _claim(session: Session, ids: Iterable[int]) -> tuple[set[int], dict[int, PendingAssetRun]]:
    """Of the pending runs ``ids``: those that exist, and those this loop now holds
    (by primary key, skipping the ones another scheduler holds)."""
    wanted = one_of(session, PendingAssetRun.id, ids)
    existing = set(session.scalars(select(PendingAssetRun.id).where(wanted)))
    claimed = {
        run.id: run
        for run in session.scalars(
            select(PendingAssetRun).where(wanted).order_by(PendingAssetRun.id)
            .with_for_update(skip_locked=True)
        )
    }  # fmt: skip
    return existing, claimed


def _in_turn(requests: Sequence[Row], budget: int) -> tuple[dict[int, int], dict[str, list[int]]]:
    """Requests taken Dag by Dag in turn until ``budget`` pending runs are named: the
    named ones (request id → pending run id) and the whole-Dag ones (Dag → request ids)."""
    queues: dict[str, list[Row]] = {}
    for request in requests:  # each Dag's oldest first; Dags in the order they asked
        queues.setdefault(request.dag_id, []).append(request)
    named: dict[int, int] = {}
    whole: dict[str, list[int]] = {}
    runs_named: set[int] = set()
    while queues and len(runs_named) < budget:
        for dag_id in list(queues):
            request = queues[dag_id].pop(0)
            if not queues[dag_id]:
                del queues[dag_id]
            if request.pending_run_id is None:
                whole.setdefault(dag_id, []).append(request.id)
            else:
                named[request.id] = request.pending_run_id
                runs_named.add(request.pending_run_id)
            if len(runs_named) >= budget:
                break
    return named, whole


def tidy_requests(session: Session) -> None:
    """Drop the requests and key log rows of Dags that were deleted, and merge the
    requests of each paused or stale Dag into one for the whole Dag, which is answered
    once it runs again."""
    for table in (AssetWakeRequest, PendingAssetEvent):  # key log rows have no foreign key
        session.execute(delete(table).where(~exists().where(DagModel.dag_id == table.dag_id)))
    waiting = session.execute(
        select(AssetWakeRequest.dag_id, func.count())
        .join(DagModel, DagModel.dag_id == AssetWakeRequest.dag_id)
        .where(DagModel.is_paused.is_(True) | DagModel.is_active.is_(False))
        .group_by(AssetWakeRequest.dag_id)
    ).all()
    merge = [dag_id for dag_id, count in waiting if count > 1]
    if merge:
        session.execute(delete(AssetWakeRequest).where(AssetWakeRequest.dag_id.in_(merge)))
        session.add_all(AssetWakeRequest(dag_id=dag_id, reason="merged") for dag_id in merge)


def _rehome(session: Session, gone: set[int]) -> list[PendingAssetRun]:
    """Key log rows whose pending run is gone move to their Dag's current pending run
    for their partition (made if needed); those runs, claimed."""
    if not gone:
        return []
    rows = session.execute(
        select(PendingAssetEvent.dag_id, PendingAssetEvent.partition_key)
        .distinct()
        .where(PendingAssetEvent.pending_run_id.in_(gone))
    ).all()
    found = []
    for dag_id, partition_key in rows:
        run = asset_events.pending_run_for(session, dag_id, partition_key)
        session.execute(
            update(PendingAssetEvent)
            .where(
                PendingAssetEvent.pending_run_id.in_(gone), PendingAssetEvent.dag_id == dag_id,
                PendingAssetEvent.partition_key == partition_key,
            )
            .values(pending_run_id=run.id)
        )  # fmt: skip
        locked = session.scalar(
            select(PendingAssetRun).where(PendingAssetRun.id == run.id)
            .with_for_update(skip_locked=True)
        )  # fmt: skip
        if locked is not None:
            found.append(locked)
    return found


@dataclass
class _Loaded:
    """What evaluating a batch of pending runs reads, in a few statements for all."""

    #: Each Dag's (dag_id, is_paused, is_active).
    models: dict[str, Row] = field(default_factory=dict)
    seen: dict[int, list[Row]] = field(default_factory=dict)


def _load(session: Session, bag: DagBag, pending: Sequence[PendingAssetRun]) -> _Loaded:
    """Their Dags' rows and documents, and the key log rows of each."""
    dag_ids = {run.dag_id for run in pending}
    loaded = _Loaded()
    if not pending:
        return loaded
    bag.prefetch(session, dag_ids)
    # Rows, not ORM objects: only whether each Dag is paused or gone is read.
    loaded.models = {
        row.dag_id: row
        for row in session.execute(
            select(DagModel.dag_id, DagModel.is_paused, DagModel.is_active)
            .where(one_of(session, DagModel.dag_id, dag_ids))
        )
    }  # fmt: skip
    for row in session.execute(
        select(AssetModel.uri, PendingAssetEvent.asset_event_id, PendingAssetEvent.id,
               AssetEvent.partition_key, PendingAssetEvent.pending_run_id)
        .join(AssetModel, AssetModel.id == PendingAssetEvent.asset_id)
        .join(AssetEvent, AssetEvent.id == PendingAssetEvent.asset_event_id)
        .where(one_of(session, PendingAssetEvent.pending_run_id, [run.id for run in pending]))
    ):  # fmt: skip
        loaded.seen.setdefault(row.pending_run_id, []).append(row)
    return loaded


def _evaluate_all(
    session: Session, bag: DagBag, pending: Sequence[PendingAssetRun], now: dt.datetime
) -> int:
    """Evaluate ``pending``, oldest first; how many fired."""
    loaded = _load(session, bag, pending)
    return sum(_evaluate(session, bag, run, now, loaded) for run in pending)


def _evaluate(
    session: Session, bag: DagBag, pending: PendingAssetRun, now: dt.datetime,
    loaded: _Loaded | None = None,
) -> bool:  # fmt: skip
    """Fire ``pending`` if its inputs have all arrived; whether it fired."""
    loaded = loaded or _load(session, bag, [pending])
    model = loaded.models.get(pending.dag_id)
    doc = bag.get(session, pending.dag_id)
    if doc is None or doc.schedule.kind != "assets" or doc.schedule.assets is None:
        # The Dag is gone, or no longer scheduled on assets: what it waited for goes.
        session.execute(
            delete(PendingAssetEvent).where(PendingAssetEvent.pending_run_id == pending.id)
        )
        session.delete(pending)
        return False
    if model is None or model.is_paused or not model.is_active:
        return False  # it waits; unpausing asks again
    seen = loaded.seen.get(pending.id, [])
    if not doc.schedule.assets.evaluate(_arrived(doc, pending.partition_key, seen)):
        return False
    partition = pending.partition_key or None
    stamp = now.isoformat()
    run = DagRun(
        dag_id=pending.dag_id, run_type=RunType.ASSET_TRIGGERED, state=DagRunState.QUEUED,
        run_id=f"asset_triggered__{partition}__{stamp}" if partition else
        f"asset_triggered__{stamp}",
        logical_date=now, data_interval_start=now, data_interval_end=now, conf="{}",
        partition_key=partition,
    )  # fmt: skip
    session.add(run)
    session.flush()
    session.add_all(
        DagRunAssetEvent(dag_run_id=run.id, asset_event_id=event_id)
        for event_id in sorted({row.asset_event_id for row in seen})
    )
    # Exactly the rows read: one written meanwhile stays, for the next pending run.
    session.execute(
        delete(PendingAssetEvent).where(PendingAssetEvent.id.in_([row.id for row in seen]))
    )
    session.delete(pending)
    return True


def _arrived(doc: SerializedDag, target: str, seen: Sequence[Row]) -> set[str]:
    """The inputs whose events the pending run for ``target`` has all it needs of: any
    one event, or, for a partition-driven Dag, every partition its mapper needs."""
    mappers = doc.schedule.partition_mappers
    if not mappers:
        return {row.uri for row in seen}
    keys: dict[str, set[str]] = {}
    for row in seen:
        keys.setdefault(row.uri, set()).add(row.partition_key)
    arrived = set()
    for uri, found in keys.items():
        needed = _needed(mappers[uri], target, doc.timezone) if uri in mappers else None
        if needed is None or found.issuperset(needed):
            arrived.add(uri)
    return arrived


@functools.lru_cache(maxsize=4096)
def _needed(mapper: Mapper, target: str, zone: str) -> frozenset[str] | None:
    """What ``mapper`` needs for ``target`` (computed once per target and zone)."""
    needed = mapper.needed(target, zone_from_name(zone))
    return None if needed is None else frozenset(needed)


def triggering_events(session: Session, dag_run_id: int) -> dict[str, list[dict[str, Any]]]:
    """The events that triggered run ``dag_run_id``, by asset URI, oldest first."""
    rows = session.execute(
        select(AssetModel.uri, AssetEvent)
        .join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
        .join(DagRunAssetEvent, DagRunAssetEvent.asset_event_id == AssetEvent.id)
        .where(DagRunAssetEvent.dag_run_id == dag_run_id)
        .order_by(AssetEvent.timestamp, AssetEvent.id)
    ).all()
    found: dict[str, list[dict[str, Any]]] = {}
    for uri, event in rows:
        found.setdefault(uri, []).append({
            "id": event.id, "partition_key": event.partition_key,
            "extra": json.loads(event.extra or "{}"),
            "timestamp": aware(event.timestamp).isoformat(),
            "source_dag_id": event.source_dag_id, "source_run_id": event.source_run_id,
            "source_task_id": event.source_task_id,
        })  # fmt: skip
    return found


class AssetScheduling:
    """The scheduler's asset work in each loop: answer wake requests, and run the
    resync passes, the safety net for a key log row written without its request (at
    start-up, then every ``[scheduler] asset_partition_resync_interval``).

    A pass evaluates every pending run, in id order, a tenth of the loop's budget at a
    time; its progress is kept only once the loop's transaction committed
    (:meth:`committed`), so a loop that failed is done again.
    """

    def __init__(self, budget: int, resync_interval: float):
        self.budget, self.resync_interval = budget, resync_interval
        #: The pass under way: (why, the last pending run id it evaluated, when it began).
        self.resync: tuple[str, int, float] | None = ("startup", 0, time.monotonic())
        self._next_pass = 0.0
        self._progress: tuple[str, int, float] | None = None
        self._fired = 0
        #: Where each whole-Dag request's fan-out got to (see evaluate_requested).
        self.fanout: dict[str, tuple[int, int]] = {}
        self._fanout: dict[str, tuple[int, int]] = {}

    def loop(self, session: Session, bag: DagBag, now: dt.datetime) -> int:
        """This loop's share of the work, in the caller's transaction; runs created."""
        self._fanout = dict(self.fanout)
        created = evaluate_requested(session, bag, now, self.budget, self._fanout)
        if self.resync is None and time.monotonic() >= self._next_pass:
            self.resync = ("periodic", 0, time.monotonic())
        self._progress, self._fired = self.resync, 0
        if self.resync is not None:
            why, after, began = self.resync
            if after == 0:  # a pass begins
                tidy_requests(session)
            share = max(1, self.budget // 10)
            batch = session.scalars(
                select(PendingAssetRun).where(PendingAssetRun.id > after)
                .order_by(PendingAssetRun.id).limit(share).with_for_update(skip_locked=True)
            ).all()  # fmt: skip
            self._fired = _evaluate_all(session, bag, batch, now)
            created += self._fired
            done = len(batch) < share
            self._progress = None if done else (why, batch[-1].id, began)
        return created

    def committed(self) -> None:
        """The loop's transaction committed: keep the fan-outs' and the pass's progress,
        count what the pass fired."""
        self.fanout = self._fanout
        if self.resync is None:
            return
        why, _, began = self.resync
        if self._fired:
            metrics.incr("scheduler.asset_partitions.resync_fired", self._fired,
                         tags={"pass": why})  # fmt: skip
        self.resync = self._progress
        if self.resync is None:
            metrics.timing("scheduler.asset_partitions.resync_pass_duration",
                           (time.monotonic() - began) * 1000, tags={"pass": why})  # fmt: skip
            self._next_pass = time.monotonic() + self.resync_interval
