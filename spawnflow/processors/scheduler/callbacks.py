"""Dag callbacks, the scheduler's side: when a run ends, start a ``dag-callback`` child
for its Dag's ``on_success_callback`` or ``on_failure_callback``, and watch it. The same
child calls a task's ``on_failure_callback`` (or ``on_retry_callback``) when the
scheduler ends a try whose supervisor was lost: no task process is left to call it.

The scheduler never imports a Dag file (the serialized Dag only says which callbacks
exist), and never waits for a callback: each child is launched and then serviced by a
watch of its own, a turn of which costs nothing when nothing happened
(:meth:`DagCallbacks.tend`, called every loop). A child gets the Dag processor's
``file_parsing_timeout`` to import the file and ``[core] callback_timeout`` for the
callbacks, then it is stopped. What raised is logged in the scheduler's log; the run's
state stays what it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from spawnflow.bootstrap import launcher, logs
from spawnflow.bootstrap.child import ChildBootError, ExitStatus
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.watch import Watch, Watched
from spawnflow.bootstrap.wire import Message
from spawnflow.comms.states import DagRunState, TaskState
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.processors.dag_callback import TARGET, DagCallbackEnded
from spawnflow.processors.scheduler.runs import DagBag, aware

log = logs.get_logger("spawnflow.scheduler")

#: The callback a run's end calls, and the context's ``reason`` (Airflow's words).
_ENDS: dict[str, tuple[str, str]] = {
    DagRunState.SUCCESS: ("on_success_callback", "success"),
    DagRunState.FAILED: ("on_failure_callback", "task_failure"),
}


@dataclass(frozen=True)
class Call:
    """One Dag callback, or a task's (``task_id``) callback, to make: plain data, read
    before the run's session ends."""

    dag_file: str
    dag_id: str
    which: str
    context: dict[str, Any]
    task_id: str | None = None


def calls_for(session: Session, bag: DagBag, ended: list[DagRun]) -> list[Call]:
    """The callbacks the runs that just ended call (only Dags that have them)."""
    calls = []
    for run in ended:
        if run.state not in _ENDS:
            continue
        which, reason = _ENDS[run.state]
        doc = bag.get(session, run.dag_id)
        if doc is None or which not in doc.callbacks:
            continue
        failed = sorted(session.scalars(
            select(TaskInstance.task_id).where(
                TaskInstance.dag_run_id == run.id,
                TaskInstance.state.in_((TaskState.FAILED, TaskState.UPSTREAM_FAILED)),
            )
        )) if run.state == DagRunState.FAILED else []  # fmt: skip
        context = {
            "dag_id": run.dag_id, "run_id": run.run_id, "state": str(run.state),
            "reason": reason,
            "logical_date": aware(run.logical_date), "conf": json.loads(run.conf or "{}"),
            "failed_task_ids": failed,
        }  # fmt: skip
        calls.append(Call(doc.fileloc, run.dag_id, which, context))
    return calls


def failure_calls_for(session: Session, bag: DagBag, ended: list[TaskInstance]) -> list[Call]:
    """The failure callbacks of tries the scheduler ended because their supervisor was
    lost (``ended``: task instances now ``failed`` or ``up_for_retry``): each task's
    ``on_retry_callback`` if another try follows, else its ``on_failure_callback``."""
    calls = []
    for ti in ended:
        which = ("on_retry_callback" if ti.state == TaskState.UP_FOR_RETRY
                 else "on_failure_callback")  # fmt: skip
        doc = bag.get(session, ti.dag_id)
        if doc is None or ti.task_id not in doc.task_index:
            continue  # the Dag or the task is gone: nothing says it has callbacks
        run = session.get(DagRun, ti.dag_run_id)
        if which not in doc.task(ti.task_id).callbacks or run is None:
            continue
        context = {
            "dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": run.run_id,
            "try_number": ti.try_number, "state": str(ti.state), "reason": ti.reason,
            "logical_date": aware(run.logical_date), "conf": json.loads(run.conf or "{}"),
        }  # fmt: skip
        calls.append(Call(doc.fileloc, ti.dag_id, which, context, task_id=ti.task_id))
    return calls


class DagCallbacks:
    """The ``dag-callback`` children of one scheduler; constructing it starts nothing."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.watch = Watch()

    def fire(self, calls: list[Call]) -> None:
        """Start a child for each call; never waits for one."""
        for call in calls:
            spec = launcher.ChildSpec(
                "dag-callback", TARGET,
                {"dag_file": call.dag_file, "dags_folder": str(self.settings.core.dags_folder),
                 "dag_id": call.dag_id, "which": call.which, "context": call.context,
                 "task_id": call.task_id},
                settings=self.settings, kill_with_parent=True,
            )  # fmt: skip
            try:
                child = launcher.launch(spec)
            except Exception as error:  # noqa: BLE001 - a callback never stops the scheduler
                log.error("dag callback not started", dag_id=call.dag_id, callback=call.which,
                          error=f"{type(error).__name__}: {error}")  # fmt: skip
                continue
            self._watch(child, call)
        self.tend()

    def _watch(self, child: launcher.Child, call: Call) -> None:
        where = {"dag_id": call.dag_id, "run_id": call.context["run_id"], "callback": call.which}
        if call.task_id is not None:
            where["task_id"] = call.task_id
        ended: list[DagCallbackEnded] = []
        budget = self.settings.dag_processor.file_parsing_timeout
        budget += self.settings.core.callback_timeout

        def on_ready(watched: Watched) -> None:
            watched.set_deadline(budget)

        def on_message(watched: Watched, message: Message) -> None:
            if isinstance(message, DagCallbackEnded):
                ended.append(message)

        def on_deadline(watched: Watched) -> None:
            log.error("dag callback stopped: it did not end within [dag_processor] "
                      "file_parsing_timeout plus [core] callback_timeout", seconds=budget,
                      **where)  # fmt: skip
            self.watch.stop(watched, grace=min(self.settings.core.stop_grace_period, 10.0))

        def on_boot_failure(watched: Watched, error: ChildBootError) -> None:
            log.error("dag callback could not start", error=str(error), **where)

        def on_exit(watched: Watched, status: ExitStatus) -> None:
            if not ended:
                if not watched.stopping:
                    log.error("dag callback process ended before reporting",
                              status=status.describe(meaning=False), **where)  # fmt: skip
                return
            report = ended[0]
            if report.problem is not None:
                log.error("dag callback not called", problem=report.problem, **where)
            for error in report.errors:
                log.error("dag callback failed", error=error, **where)
            if report.problem is None and not report.errors:
                log.info("dag callback done", **where)

        self.watch.add(
            child, on_ready=on_ready, on_message=on_message, on_deadline=on_deadline,
            on_boot_failure=on_boot_failure, on_exit=on_exit,
        )  # fmt: skip

    def tend(self) -> None:
        """Service the children (messages, exits, deadlines) without waiting."""
        if self.watch.watched:
            self.watch.wait(0)

    def running(self) -> int:
        return len(self.watch.watched)

    def finish(self, timeout: float) -> None:
        """The scheduler stops: let the children end within ``timeout``, then kill them."""
        self.watch.until(lambda: not self.watch.watched, timeout=timeout)
        for child in self.watch.children():
            child.stop(grace=0)
        self.watch.until(lambda: not self.watch.watched, timeout=1.0)
