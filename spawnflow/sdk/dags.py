"""The Dag: a named, scheduled graph of tasks, defined in a Python file.

Use it as a context manager (``with Dag("etl", schedule="@daily") as dag:``) or as
a decorator (``@dag(schedule="@daily")`` on a function that creates the tasks; call
the function once at module level). A Dag is validated when it is built: ids,
schedule, duplicate tasks and cycles each raise :class:`DagDefinitionError` with
the file, the Dag and the task in the message.
"""

from __future__ import annotations

import datetime as dt
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spawnflow.sdk import building
from spawnflow.sdk import schedule as schedules
from spawnflow.sdk.assets import Asset, assets_in
from spawnflow.sdk.callbacks import DAG_CALLBACKS, Callback, callback_list
from spawnflow.sdk.names import check_id
from spawnflow.sdk.partitions import CustomMapper
from spawnflow.sdk.tasks import DagDefinitionError, Task

if TYPE_CHECKING:
    from types import FrameType

_SDK_FOLDER = str(Path(__file__).parent)


def _caller_file() -> str:
    """The file of the first frame outside the SDK: where the Dag is defined."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_SDK_FOLDER):
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else "<unknown>"


class Dag:
    """A workflow: tasks, their dependencies and when it runs.

    Args:
        dag_id: unique name: letters, digits, ``_``, ``-`` and ``.``.
        schedule: a cron expression, a preset (``@hourly``, ``@daily``, ``@weekly``,
            ``@monthly``, ``@yearly``...), ``@once``, a ``timedelta``, an
            :class:`~spawnflow.sdk.assets.Asset` (run when a task updates it), Assets
            combined with ``&`` (all) or ``|`` (any), a list of Assets (all of them), or
            None (manual only).
        start_date: first logical date; naive datetimes are UTC. Needed unless the
            schedule is None or on Assets.
        end_date: last logical date, or None.
        catchup: create runs for every interval since ``start_date`` (default False).
        tags: labels for listing.
        default_args: defaults for each task (``retries``, ``retry_delay``,
            ``retry_exponential_backoff``, ``max_retry_delay``, ``execution_timeout``,
            ``trigger_rule``, and the task callbacks ``on_execute_callback``,
            ``on_success_callback``, ``on_retry_callback``, ``on_failure_callback``).
        params: JSON-ready parameters a run can override with its ``conf``.
        max_active_runs: runs of this Dag that may be active at once.
        max_active_tasks: task instances of this Dag that may run at once.
        description: one line for listings.
        partition_mappers: makes an Asset-scheduled Dag partition-driven: a run per
            target partition, once every input partition it needs has an event. Maps
            input Assets to mappers (``HourToDay()``…, or an instance of your own
            ``CustomMapper`` subclass, see :mod:`spawnflow.sdk.partitions`); the others
            get ``Identity()``. Days,
            weeks and months are the start date's time zone's (UTC without one).
        on_success_callback: called (a function of the context, or a list of them) when
            a run succeeds, in a child of the scheduler that imports this Dag file and
            has no database. The context: ``dag_id``, ``run_id``, ``state``,
            ``reason``, ``logical_date``, ``conf``. A callback that raises is logged in
            the scheduler's log and changes nothing.
        on_failure_callback: the same, when a run fails.

    Raises:
        DagDefinitionError: for a bad id, schedule or argument.
    """

    def __init__(
        self,
        dag_id: str,
        *,
        schedule: object = None,
        start_date: dt.datetime | None = None,
        end_date: dt.datetime | None = None,
        catchup: bool = False,
        tags: list[str] | tuple[str, ...] = (),
        default_args: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        max_active_runs: int = 16,
        max_active_tasks: int = 16,
        description: str | None = None,
        partition_mappers: dict[Any, Any] | None = None,
        on_success_callback: Callback | list[Callback] | None = None,
        on_failure_callback: Callback | list[Callback] | None = None,
    ):
        self.fileloc = _caller_file()
        self.dag_id = dag_id
        try:
            check_id(dag_id, "dag id")
            self.schedule = schedules.parse(schedule)
            self.start_date = schedules.aware(start_date, "start_date")
            self.end_date = schedules.aware(end_date, "end_date")
            # Cron schedules run in the start date's zone, daylight saving included.
            self.timezone = schedules.zone_name(self.start_date.tzinfo if self.start_date else None)
            # The Asset objects of an Asset schedule: its condition keeps only their URIs.
            self.schedule_assets: list[Asset] = (
                assets_in(schedule) if self.schedule.kind == "assets" else []
            )
            #: The CustomMapper objects of a partition-driven Dag, by input URI: only
            #: the file parser, which has this object, calls them.
            self.custom_mappers: dict[str, CustomMapper] = {}
            if partition_mappers is not None:
                self.schedule, self.custom_mappers = schedules.with_partitions(
                    self.schedule, partition_mappers
                )
            if self.schedule.kind not in ("manual", "assets") and self.start_date is None:
                raise ValueError(
                    f"a Dag with schedule {self.schedule.describe()!r} needs a start_date"
                )
            for name, value in (
                ("max_active_runs", max_active_runs),
                ("max_active_tasks", max_active_tasks),
            ):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"{name} {value!r} must be a whole number of at least 1")
            if not all(isinstance(tag, str) for tag in tags):
                raise ValueError(f"tags {tags!r} must be strings")
            given = {"on_success_callback": on_success_callback,
                     "on_failure_callback": on_failure_callback}  # fmt: skip
            #: Each callback's functions, by argument name (only those it has).
            self.callbacks: dict[str, list[Callback]] = {
                name: found for name in DAG_CALLBACKS
                if (found := callback_list(given[name], name))
            }  # fmt: skip
        except ValueError as error:
            raise self.definition_error(str(error)) from None
        self.catchup = bool(catchup)
        self.tags = list(tags)
        self.default_args = dict(default_args or {})
        self.params = dict(params or {})
        self.max_active_runs = max_active_runs
        self.max_active_tasks = max_active_tasks
        self.description = description
        self.task_dict: dict[str, Task] = {}
        #: Its task groups by id (spawnflow.sdk.groups.TaskGroup), nested ones too.
        self.task_groups: dict[str, Any] = {}
        #: The next number to try for each @task name called again (``name__N``).
        self.next_suffix: dict[str, int] = {}
        building.record(self)

    def __repr__(self) -> str:
        return f"<Dag {self.dag_id}: {len(self.task_dict)} tasks>"

    def definition_error(self, problem: str, task_id: str | None = None) -> DagDefinitionError:
        """An error naming this Dag's file, the Dag and, if given, the task."""
        where = f"{self.fileloc}: Dag {self.dag_id!r}"
        if task_id is not None:
            where += f": task {task_id!r}"
        return DagDefinitionError(f"{where}: {problem}")

    # -- building ---------------------------------------------------------------------

    def __enter__(self) -> Dag:
        building.enter(self)
        return self

    def __exit__(self, kind, error, traceback) -> None:
        building.leave()
        if kind is None:
            self.validate()

    def add_task(self, task: Task) -> None:
        if task.task_id in self.task_dict:
            raise self.definition_error("a task with this id already exists", task.task_id)
        if task.task_id in self.task_groups:
            raise self.definition_error("a task group with this id already exists", task.task_id)
        self.task_dict[task.task_id] = task

    def add_dependency(self, upstream: Task, downstream: Task) -> None:
        if upstream.dag is not downstream.dag:
            raise downstream.dag.definition_error(
                f"cannot depend on task {upstream.task_id!r} of Dag {upstream.dag.dag_id!r}",
                downstream.task_id,
            )
        if upstream is downstream:
            raise self.definition_error("a task cannot depend on itself", upstream.task_id)
        upstream.downstream_task_ids.add(downstream.task_id)
        downstream.upstream_task_ids.add(upstream.task_id)

    @property
    def tasks(self) -> list[Task]:
        return list(self.task_dict.values())

    def validate(self) -> Dag:
        """Check the graph; DagDefinitionError naming a cycle. Returns the Dag."""
        self.topological_order()
        return self

    def topological_order(self) -> list[str]:
        """Task ids, every task after its upstream tasks (Kahn's algorithm)."""
        waiting = {tid: len(task.upstream_task_ids) for tid, task in self.task_dict.items()}
        ready = sorted(tid for tid, count in waiting.items() if count == 0)
        order: list[str] = []
        while ready:
            tid = ready.pop(0)
            order.append(tid)
            for downstream in sorted(self.task_dict[tid].downstream_task_ids):
                waiting[downstream] -= 1
                if waiting[downstream] == 0:
                    ready.append(downstream)
        if len(order) != len(self.task_dict):
            stuck = sorted(tid for tid, count in waiting.items() if count > 0)
            cycle = _find_cycle(self, stuck)
            raise self.definition_error(
                "the tasks form a cycle: " + " >> ".join(cycle), task_id=cycle[0]
            )
        return order

    def get_task(self, task_id: str) -> Task:
        try:
            return self.task_dict[task_id]
        except KeyError:
            raise KeyError(f"Dag {self.dag_id!r} has no task {task_id!r}") from None


def _find_cycle(dag: Dag, candidates: list[str]) -> list[str]:
    """One cycle among ``candidates``, as a path that returns to its first task."""
    for start in candidates:
        path, seen = [start], {start}
        current = start
        while True:
            nexts = sorted(t for t in dag.task_dict[current].downstream_task_ids if t in candidates)
            if not nexts:
                break
            current = nexts[0]
            if current in seen:
                return [*path[path.index(current) :], current]
            path.append(current)
            seen.add(current)
    return candidates


def dag(dag_id: str | Callable[..., Any] | None = None, **options: Any):
    """Decorate a function that creates tasks; calling it builds and returns the Dag.

    ``@dag`` or ``@dag(schedule="@daily", ...)``; the Dag id defaults to the
    function's name. Call the decorated function once at module level.
    """

    def decorate(function: Callable[..., Any]) -> Callable[..., Dag]:
        @functools.wraps(function)
        def build(*args: Any, **kwargs: Any) -> Dag:
            with Dag(name or function.__name__, **options) as built:
                function(*args, **kwargs)
            return built

        return build

    if callable(dag_id):
        name = None
        return decorate(dag_id)
    name = dag_id
    return decorate


def iter_dags(objects: dict[str, Any]) -> Iterator[Dag]:
    """The Dags among a module's globals."""
    for value in objects.values():
        if isinstance(value, Dag):
            yield value
