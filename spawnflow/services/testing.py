"""``dags test`` and ``tasks test``: run a Dag or a task in the foreground, through real
task processes.

``dags test`` creates a manual run and drives it with the scheduler's own code and
the local executor, limited to that run. ``tasks test`` runs one task with a
supervisor that writes nothing: its XComs are kept in memory and shown.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from spawnflow.bootstrap import launcher, orm, wire
from spawnflow.bootstrap.child import stop_many
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.state import ClearState, GetState, SetState, StateReplaced, StateValue
from spawnflow.comms.states import DagRunState, ErrorKind, TaskState
from spawnflow.comms.tasks import Done, Workload, XComPull, XComPush, XComValue
from spawnflow.executors.local import LocalExecutor
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.processors.scheduler import runs
from spawnflow.processors.scheduler.job import Scheduler
from spawnflow.processors.triggerer.job import fire_once
from spawnflow.processors.worker.recording import TryRecorder
from spawnflow.processors.worker.supervisor import TaskSupervisor
from spawnflow.sdk import xcom
from spawnflow.sdk.serialize import SerializedDag
from spawnflow.services.dags import get_dag
from spawnflow.services.records import UnknownDag, did_you_mean

TRIGGERER_TARGET = "spawnflow.processors.triggerer.job:run"


def ensure_parsed(settings: Settings, dag_id: str) -> None:
    """Parse the Dag files once if ``dag_id`` is not known yet."""
    try:
        get_dag(dag_id)
    except UnknownDag:
        from spawnflow.processors.dag_processor.manager import DagFileProcessorManager

        DagFileProcessorManager(settings).run(once=True)
        get_dag(dag_id)  # UnknownDag, with a suggestion, if it still is not there


@dataclass(frozen=True)
class TaskChange:
    """A task instance of the tested run that changed state."""

    task_id: str
    state: str
    reason: str | None
    try_number: int
    #: How long its try ran, once it ended.
    seconds: float | None
    #: The element of a mapped task; -1 for an unmapped task.
    map_index: int = -1


def test_dag(
    settings: Settings,
    dag_id: str,
    conf: dict[str, Any] | None,
    on_change: Callable[[TaskChange], None],
    on_start: Callable[[str], None],
    *,
    logical_date: dt.datetime | None = None,  # noqa: PT028 (no test: it runs a Dag)
) -> tuple[DagRun, list[TaskInstance]]:
    """Run one Dag run to its end; ``on_start(run_id)`` once it is created, then
    ``on_change`` as its task instances change state."""
    ensure_parsed(settings, dag_id)
    with orm.session_scope() as session:
        created = runs.trigger_run(session, dag_id, conf, logical_date=logical_date)
        run_id, name = created.id, created.run_id
    on_start(name)
    seen: dict[tuple[str, int], str] = {}
    triggerer: list[launcher.Child] = []

    def report(_summary) -> None:
        with orm.session_scope(write=False) as session:
            for ti in session.query(TaskInstance).filter(TaskInstance.dag_run_id == run_id):
                if seen.get((ti.task_id, ti.map_index)) != ti.state:
                    seen[ti.task_id, ti.map_index] = ti.state
                    ended = ti.state in (*TaskState.FINISHED, TaskState.UP_FOR_RETRY)
                    seconds = ti.duration if ended else None
                    on_change(TaskChange(ti.task_id, ti.state, ti.reason, ti.try_number, seconds,
                                         ti.map_index))  # fmt: skip
        if not triggerer and TaskState.DEFERRED in seen.values():
            # A task deferred: a triggerer for this run's triggers, until the run ends.
            spec = launcher.ChildSpec("triggerer", TRIGGERER_TARGET, {"only_runs": [run_id]},
                                      settings=settings, warm_stop_group=False)  # fmt: skip
            triggerer.append(launcher.launch(spec))

    def finished() -> bool:
        with orm.session_scope() as session:
            run = session.get(DagRun, run_id)
            assert run is not None  # created above, and spawnflow never deletes runs
            return run.state in DagRunState.FINISHED

    executor = LocalExecutor(settings)
    scheduler = Scheduler(settings, executor=executor, only_runs={run_id}, on_loop=report)
    try:
        scheduler.run(until=finished)
    except BaseException as error:
        # Stopped, or the executor gave up (workers that cannot boot): the run ends
        # here, failed with the reason, rather than stay running with nobody on it.
        _fail_unfinished(run_id, _why_it_ended(error))
        raise
    finally:
        stop_many(triggerer)
    report(None)
    with orm.session_scope() as session:
        run = session.get(DagRun, run_id)
        assert run is not None  # created above, and spawnflow never deletes runs
        tis = list(session.query(TaskInstance).filter(TaskInstance.dag_run_id == run_id)
                   .order_by(TaskInstance.id))  # fmt: skip
        # A mapped task's elements together, where its first row is, by map index.
        first: dict[str, int] = {}
        for position, ti in enumerate(tis):
            first.setdefault(ti.task_id, position)
        return run, sorted(tis, key=lambda ti: (first[ti.task_id], ti.map_index))


def _why_it_ended(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt | SystemExit):
        return "dags test was stopped before the task finished"
    return f"dags test ended before the task finished: {error}"


def _fail_unfinished(run_id: int, reason: str) -> None:
    """Fail the run and every task instance of it that did not finish, with ``reason``."""
    from sqlalchemy import exc

    now = runs.utcnow()
    try:
        with orm.session_scope() as session:
            run = session.get(DagRun, run_id, with_for_update=True)
            if run is None or run.state in DagRunState.FINISHED:
                return
            for ti in session.query(TaskInstance).filter(
                TaskInstance.dag_run_id == run_id, TaskInstance.state.not_in(TaskState.FINISHED)
            ):
                ti.state, ti.reason, ti.end_date = TaskState.FAILED, reason, now
            run.state, run.end_date = DagRunState.FAILED, now
    except (exc.SQLAlchemyError, orm.DatabaseUnavailable):
        pass  # the database is what failed: the run is left for a scheduler to settle


class InMemoryRecorder(TryRecorder):
    """Records a test try nowhere: no task instance, XComs kept here and shown."""

    stores_xcoms = False

    def __init__(self, show: Callable[[str], None],
                 upstream: dict[tuple[str, str], str] | None = None,
                 strict: bool = False):  # fmt: skip
        self.show = show
        #: What upstream tasks pushed, by (task id, key): ``dags check`` runs a Dag's
        #: tasks in order and hands each what the earlier ones pushed; ``tasks test
        #: --xcom`` gives them by hand.
        self.upstream = upstream or {}
        #: A missing upstream XCom fails the pull instead of reading as None.
        self.strict = strict
        #: The upstream XComs the task asked for that nobody gave, as ``task.key``.
        self.missing: list[str] = []
        self.xcoms: dict[str, str] = {}
        #: The task's state store: key to (JSON text, reference).
        self.state: dict[str, tuple[str | None, str | None]] = {}

    def answer(self, request: wire.Request) -> wire.Response:
        if isinstance(request, XComPush):
            self.xcoms[request.key] = request.value
            return Done(id=request.id)
        if isinstance(request, XComPull):
            value = self.upstream.get((request.task_id, request.key))
            if value is None:
                name = f"{request.task_id}.{request.key}"
                self.missing.append(name)
                if self.strict:
                    return wire.ErrorResponse(
                        id=request.id, kind=ErrorKind.XCOM_NOT_FOUND,
                        message=f"no upstream XCom {name} in this test; give it with --xcom",
                    )  # fmt: skip
                self.show(f"(no upstream XCom {name} in this test: it reads as None)")
            return XComValue(id=request.id, value=value)
        return super().answer(request)

    def answer_state(self, request: wire.Request) -> wire.Response:
        """The state store, in memory: what the test's tries keep is gone after it."""
        ref = request.ref  # type: ignore[attr-defined]  # every state request has one
        if isinstance(request, GetState):
            value, reference = self.state.get(ref.key, (None, None))
            return StateValue(id=request.id, value=value, reference=reference)
        if isinstance(request, ClearState):
            removed = [r for _, r in self.state.values() if r]
            self.state.clear()
            return StateReplaced(id=request.id, previous=removed)
        _, old = self.state.pop(ref.key, (None, None))
        if isinstance(request, SetState):
            self.state[ref.key] = (request.value, request.reference)
        kept = request.reference if isinstance(request, SetState) else None
        return StateReplaced(id=request.id, previous=[old] if old and old != kept else [])


@dataclass
class TaskTest:
    """How ``tasks test`` went: the state, why, the XComs pushed, the log file, and the
    upstream XComs the task asked for that nobody gave (``task.key``)."""

    state: str
    reason: str | None
    xcoms: dict[str, str]
    log_file: Path
    missing: list[str] = field(default_factory=list)


def test_task(settings: Settings, dag_id: str, task_id: str, show: Callable[[str], None], *,
              upstream: dict[tuple[str, str], str] | None,
              strict: bool, map_index: int | None) -> TaskTest:  # fmt: skip
    """Run one task once, in a task process, writing no state; ``upstream`` XComs by
    (task id, key), a missing one failing the task if ``strict``; ``map_index``: which
    element of a mapped task (None: the first)."""
    ensure_parsed(settings, dag_id)
    _, document = get_dag(dag_id)
    if task_id not in document.task_ids:
        hint = did_you_mean(task_id, document.task_ids)
        raise UserError(f"Dag {dag_id!r} has no task {task_id!r}"
                        + (hint or f"; it has {', '.join(document.task_ids)}"))  # fmt: skip
    if map_index is not None and not document.task(task_id).is_mapped:
        raise UserError(f"task {task_id!r} of Dag {dag_id!r} is not mapped: it takes no map index")
    return run_task_once(settings, document, task_id, show, upstream=upstream, strict=strict,
                         map_index=map_index)  # fmt: skip


def run_task_once(
    settings: Settings, document: SerializedDag, task_id: str, show: Callable[[str], None], *,
    method: str | None = None, upstream: dict[tuple[str, str], str] | None = None,
    timeout: float | None = None, strict: bool = False, map_index: int | None = None,
) -> TaskTest:  # fmt: skip
    """Run ``task_id`` of ``document`` once in a task process, writing no state.

    ``method``: the task process's start method, and its own ``multiprocessing``
    default (None: the executor's method, Python's default). ``upstream``: the XComs it
    may pull, by (task id, key); others are None. ``timeout``: seconds the task's
    ``execute`` may take at most, as an ``execution_timeout`` (the task's own, if
    shorter, still applies). ``map_index``: which element of a mapped task it runs
    (None: the first; ignored for an unmapped task).
    """
    task = document.task(task_id)
    index = (0 if map_index is None else map_index) if task.is_mapped else -1
    limits = [s for s in (task.execution_timeout, timeout) if s is not None]
    now = runs.utcnow()
    folder = Path(tempfile.mkdtemp(prefix="spawnflow-task-test-"))
    workload = Workload(
        ti_id=0, dag_id=document.dag_id, run_id=f"test__{now.isoformat()}", task_id=task_id,
        try_number=1, dag_file=document.fileloc, dags_folder=str(settings.core.dags_folder),
        logical_date=now, data_interval_start=now, data_interval_end=now, conf={},
        params=document.params, execution_timeout=min(limits) if limits else None,
        retry_delay=task.retry_delay, log_file=str(folder / "attempt=1.log"), map_index=index,
        retry_exponential_backoff=task.retry_exponential_backoff,
        max_retry_delay=task.max_retry_delay, callbacks=list(task.callbacks),
        multiprocessing_start_method=method,
    )  # fmt: skip
    recorder = InMemoryRecorder(show, upstream, strict)
    supervisor = TaskSupervisor(workload, settings, recorder=recorder, method=method)
    state = supervisor.run()
    reason = supervisor.reason
    while state == TaskState.DEFERRED and supervisor.deferral is not None:
        deferral = supervisor.deferral
        show(f"(deferred to {deferral.classpath.rsplit('.', 1)[-1]}; running its trigger here "
             f"until it fires, then {deferral.method_name})")  # fmt: skip
        payload, failure = fire_once(settings, deferral.classpath, deferral.trigger_kwargs,
                                     deferral.timeout)  # fmt: skip
        if payload is None:
            state, reason = TaskState.FAILED, f"its trigger failed: {failure}"
            break
        kwargs = xcom.decode(deferral.next_kwargs)
        kwargs["event"] = xcom.decode(payload)
        workload = msgspec.structs.replace(
            workload, next_method=deferral.method_name,
            next_kwargs=xcom.encode(kwargs, subject="the trigger's event"),
        )  # fmt: skip
        supervisor = TaskSupervisor(workload, settings, recorder=recorder, method=method)
        state, reason = supervisor.run(), supervisor.reason
    return TaskTest(state, reason, recorder.xcoms, Path(workload.log_file), recorder.missing)
