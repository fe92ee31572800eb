"""Serialized Dags: the versioned JSON document the Dag processor stores.

The scheduler and the CLI read only this document; they never import a Dag file.
``version`` changes when the document's shape does; a reader refuses a version it
does not know instead of guessing.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
from typing import Any

import msgspec

from spawnflow.sdk.assets import Asset, AssetRef, WatcherRef, watcher_refs
from spawnflow.sdk.callbacks import TASK_CALLBACKS
from spawnflow.sdk.dags import Dag
from spawnflow.sdk.mapping import expand_json
from spawnflow.sdk.schedule import Schedule
from spawnflow.sdk.tasks import Task, to_json

VERSION = 1


class SerializedTask(msgspec.Struct, frozen=True):
    task_id: str
    kind: str
    upstream: list[str]
    downstream: list[str]
    retries: int
    retry_delay: float
    execution_timeout: float | None
    trigger_rule: str
    arguments: dict[str, Any]
    #: URIs of the Assets the task updates, in the task's order.
    outlets: list[str] = msgspec.field(default_factory=list)
    #: The Celery executor's queue for it (None: [celery] default_queue).
    queue: str | None = None
    retry_exponential_backoff: bool = False
    #: Seconds; None: no cap but a day's.
    max_retry_delay: float | None = None
    #: The callbacks the task has (``on_success_callback``...): only their names, since
    #: the scheduler never imports the Dag file; the task process finds them there.
    callbacks: list[str] = msgspec.field(default_factory=list)
    #: The task groups it is in, outermost first (``["extract", "extract.clean"]``).
    groups: list[str] = msgspec.field(default_factory=list)
    #: The pool a try takes ``pool_slots`` slots of; its own priority weight, and how
    #: the effective weight is made from it (see :attr:`SerializedDag.priority_weights`).
    pool: str = "default_pool"
    pool_slots: int = 1
    priority_weight: int = 1
    weight_rule: str = "downstream"
    #: How many of its task instances may run at once over all runs (None: no bound).
    max_active_tis_per_dag: int | None = None
    #: A mapped task's expansion (:func:`spawnflow.sdk.mapping.expand_json`): ``{"kind":
    #: "expand", "mapped": {name: list or XCom reference}}`` or ``{"kind":
    #: "expand_kwargs", "value": list of dicts or XCom reference}``; None if unmapped.
    expand: dict[str, Any] | None = None

    @property
    def is_mapped(self) -> bool:
        return self.expand is not None


class SerializedDag(msgspec.Struct, frozen=True, dict=True):
    dag_id: str
    fileloc: str
    schedule: Schedule
    start_date: dt.datetime | None
    end_date: dt.datetime | None
    #: The zone cron schedules run in (an IANA name, ``UTC`` or ``+HH:MM``).
    timezone: str
    catchup: bool
    tags: list[str]
    params: dict[str, Any]
    max_active_runs: int
    max_active_tasks: int
    description: str | None
    default_args: dict[str, Any]
    #: In topological order: every task after its upstream tasks.
    tasks: list[SerializedTask]
    #: Every Asset in the schedule or a task's outlets, sorted by URI.
    assets: list[AssetRef] = msgspec.field(default_factory=list)
    #: The Dag's callbacks (``on_success_callback``, ``on_failure_callback``), by name:
    #: the scheduler starts a child that imports the Dag file for those it has.
    callbacks: list[str] = msgspec.field(default_factory=list)

    @property
    def task_ids(self) -> list[str]:
        return [task.task_id for task in self.tasks]

    @functools.cached_property
    def task_index(self) -> dict[str, int]:
        """Each task's position in :attr:`tasks` (computed once per decoded document)."""
        return {task.task_id: n for n, task in enumerate(self.tasks)}

    @functools.cached_property
    def priority_weights(self) -> dict[str, int]:
        """Each task's effective priority weight, as Airflow makes it: its own weight,
        plus every downstream task's (``downstream``) or every upstream task's
        (``upstream``), or alone (``absolute``)."""
        below: dict[str, set[str]] = {}  # every task downstream of each, itself excluded
        for task in reversed(self.tasks):  # topological order: downstream ones first
            below[task.task_id] = set(task.downstream).union(*(below[d] for d in task.downstream))
        above: dict[str, set[str]] = {}
        for task in self.tasks:
            above[task.task_id] = set(task.upstream).union(*(above[u] for u in task.upstream))
        own = {task.task_id: task.priority_weight for task in self.tasks}
        related = {"downstream": below, "upstream": above}
        return {
            task.task_id: task.priority_weight + sum(
                own[other] for other in related.get(task.weight_rule, {}).get(task.task_id, ())
            )
            for task in self.tasks
        }  # fmt: skip

    def task(self, task_id: str) -> SerializedTask:
        try:
            return self.tasks[self.task_index[task_id]]
        except KeyError:
            raise KeyError(f"Dag {self.dag_id!r} has no task {task_id!r}") from None


class DagDocument(msgspec.Struct, frozen=True):
    """What the Dag processor stores for one Dag."""

    version: int
    dag: SerializedDag
    #: sha256 of the Dag file's bytes when it was parsed.
    file_hash: str


def serialize(dag: Dag) -> SerializedDag:
    """The serializable form of a built and validated Dag."""
    order = dag.topological_order()
    return SerializedDag(
        dag_id=dag.dag_id,
        fileloc=dag.fileloc,
        schedule=dag.schedule,
        start_date=dag.start_date,
        end_date=dag.end_date,
        timezone=dag.timezone,
        catchup=dag.catchup,
        tags=list(dag.tags),
        params={key: to_json(value) for key, value in dag.params.items()},
        max_active_runs=dag.max_active_runs,
        max_active_tasks=dag.max_active_tasks,
        description=dag.description,
        default_args={
            # Of a callback, the document says only that there is one.
            key: value is not None if key in TASK_CALLBACKS else _default_arg(value)
            for key, value in dag.default_args.items()
        },
        tasks=[_task(dag.task_dict[task_id]) for task_id in order],
        assets=_assets(dag, order),
        callbacks=sorted(dag.callbacks),
    )


def _assets(dag: Dag, order: list[str]) -> list[AssetRef]:
    """One AssetRef per URI the Dag references; DagDefinitionError if two Assets disagree."""
    found: dict[str, Asset] = {}
    uses: list[tuple[Asset, str | None]] = [(asset, None) for asset in dag.schedule_assets]
    for task_id in order:
        uses.extend((asset, task_id) for asset in dag.task_dict[task_id].outlets)
    watchers: dict[str, list[WatcherRef]] = {}
    for asset, user in uses:
        known = found.setdefault(asset.uri, asset)
        if (known.name, known.group) != (asset.name, asset.group):
            raise dag.definition_error(
                f"asset {asset.uri!r} is named {known.name!r} in group {known.group!r} and "
                f"{asset.name!r} in group {asset.group!r}; give it one name and group",
                user,
            )
        try:
            refs = watcher_refs(asset)
        except ValueError as error:
            raise dag.definition_error(str(error), user) from None
        if asset.watchers and watchers.setdefault(asset.uri, refs) != refs:
            raise dag.definition_error(
                f"asset {asset.uri!r} has different watchers in two places; give it one list",
                user,
            )
    return [
        AssetRef(uri=uri, name=asset.name, group=asset.group, watchers=watchers.get(uri, []))
        for uri, asset in sorted(found.items())
    ]


def _task(task: Task) -> SerializedTask:
    timeout = task.execution_timeout
    return SerializedTask(
        task_id=task.task_id,
        kind=task.kind,
        upstream=sorted(task.upstream_task_ids),
        downstream=sorted(task.downstream_task_ids),
        retries=task.retries,
        retry_delay=task.retry_delay.total_seconds(),
        execution_timeout=None if timeout is None else timeout.total_seconds(),
        trigger_rule=task.trigger_rule.value,
        arguments=task.arguments(),
        outlets=[asset.uri for asset in task.outlets],
        queue=task.queue,
        retry_exponential_backoff=task.retry_exponential_backoff,
        max_retry_delay=None
        if task.max_retry_delay is None
        else task.max_retry_delay.total_seconds(),
        callbacks=sorted(task.callbacks),
        groups=task.task_group.chain if task.task_group is not None else [],
        pool=task.pool,
        pool_slots=task.pool_slots,
        priority_weight=task.priority_weight,
        weight_rule=task.weight_rule.value,
        max_active_tis_per_dag=task.max_active_tis_per_dag,
        expand=expand_json(task),
    )


def _default_arg(value: Any) -> Any:
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return to_json(value)


def encode(document: DagDocument) -> bytes:
    """The document as JSON bytes, keys in a stable order."""
    return msgspec.json.encode(document, order="deterministic")


def decode(data: bytes | str) -> DagDocument:
    """A stored document; ValueError for one this version cannot read."""
    raw = msgspec.json.decode(data)
    version = raw.get("version") if isinstance(raw, dict) else None
    if version != VERSION:
        raise ValueError(f"serialized Dag version {version!r} is not {VERSION}; re-parse the file")
    return msgspec.convert(raw, DagDocument)


def dag_hash(dag: SerializedDag) -> str:
    """A hash of what the Dag is, so an unchanged Dag is not rewritten."""
    return hashlib.sha256(msgspec.json.encode(dag, order="deterministic")).hexdigest()


def file_hash(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()
