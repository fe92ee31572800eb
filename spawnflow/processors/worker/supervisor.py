"""The task supervisor: runs one try of one task in a task process and owns its clock.

It marks the task instance running, launches the task process (role ``task``), and
then serves it from one wait loop: answers its XCom and Variable requests, copies
its stdout and stderr into the try's log file, heartbeats the task instance, stops
the task's whole tree when ``execution_timeout`` passes (law 8: also when the task
ignores signals or sits in native code), and stops it within one heartbeat when
someone marks the task instance failed or clears it. Then it writes how the try
ended.

Every write is conditional on the task instance still being in this try (state
and try number): a try that was cleared, failed from outside or handed to
another worker is never overwritten by a supervisor that has not noticed yet.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import exc

from spawnflow.bootstrap import launcher, lifecycle, logs, orm, remote_logs, wire
from spawnflow.bootstrap.child import ChildBootError, ExitStatus
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.watch import Watch, Watched
from spawnflow.comms.states import ErrorKind, TaskState
from spawnflow.comms.tasks import (
    Deferral,
    ExecuteEnded,
    ExecuteStarting,
    TaskOutcome,
    TaskStarting,
    Workload,
    XComPull,
    XComPush,
)
from spawnflow.processors.worker.attempt_log import AttemptLog
from spawnflow.processors.worker.recording import DatabaseRecorder, TryRecorder
from spawnflow.processors.worker.xcoms import XComService, database_error
from spawnflow.xcoms import BackendChoice
from spawnflow.xcoms.calls import runner_for

TARGET = "spawnflow.processors.task_runner:run_task"
#: A fresh task process that calls the failure callbacks of a try stopped on its
#: execution_timeout, or whose task process died before reporting.
FAILURE_CALLBACKS_TARGET = "spawnflow.processors.task_runner:call_back_failure"
#: The callbacks a failed try calls: on_retry_callback when another try follows.
_FAILURE_CALLBACKS = frozenset({"on_failure_callback", "on_retry_callback"})
#: Seconds between two checks that the task process still runs, when its sentinel is
#: silent.
LIVENESS_INTERVAL = 0.05

log = logs.get_logger("spawnflow.supervisor")


@dataclass
class _TaskRun:
    """What the watch learned about one task process."""

    outcome: TaskOutcome | None = None
    status: ExitStatus | None = None
    #: Why the supervisor stopped it ("external": the task instance changed meanwhile).
    why: str | None = None
    #: Stopped because a deadline that execution_timeout sets passed.
    timed_out: bool = False
    #: Where the task process said it is: "importing" its Dag file, "preparing"
    #: (TaskStarting: mapped element, templates, arguments, on_execute_callback),
    #: "executing" (ExecuteStarting) or "storing" (ExecuteEnded: its return value).
    phase: str = "importing"
    #: The supervisor stopped it after its outcome came (its callbacks ran over, or
    #: spawnflow shuts down): the outcome stands.
    stopped_after_outcome: bool = False


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class TaskSupervisor:
    """Runs one try; constructing one has no side effects."""

    def __init__(self, workload: Workload, settings: Settings, *,
                 xcom_backend: BackendChoice | None = None,
                 alive: Callable[[], None] | None = None,
                 recorder: TryRecorder | None = None,
                 method: str | None = None, target: str = TARGET):  # fmt: skip
        self.workload = workload
        #: What the task process runs (``tasks render`` runs another target).
        self.target = target
        #: The task process's start method; None: the executor's.
        self.method = method
        self.settings = settings
        #: The try's log on this machine (the scheduler names it relative to a logs folder).
        self.log_path = remote_logs.local_path(settings, workload.log_file)
        #: Where the try's life is written: its task instance row, unless told otherwise.
        #: Tells whoever runs this supervisor (an executor worker's executor) that it lives.
        self.alive = alive or (lambda: None)
        self.recorder = recorder or DatabaseRecorder(workload, alive=self.alive)
        #: How to route XCom calls, as the executor checked it at start-up.
        self.xcom_backend = xcom_backend or _assumed_backend(settings)
        self.reason: str | None = None
        #: What the try deferred to, if it did.
        self.deferral: Deferral | None = None
        self.xcom_service: XComService | None = None
        #: What the watch learned of the task process so far (None before it starts).
        self._task_run: _TaskRun | None = None
        #: Services the task process and its XCom helper, and runs the heartbeat.
        self.watch = Watch(liveness_interval=LIVENESS_INTERVAL)

    def run(self) -> str:
        """Run the try and return the state the task instance ended in."""
        started = self.recorder.start()
        if started is not None:
            return started  # not ours to run (any more)
        # Each step before the watch loop runs blocks; say so between them, or a slow
        # machine makes a busy worker look hung to its executor.
        self.alive()
        attempt = AttemptLog(self.log_path)
        attempt.event("task queued to this worker", worker_pid=os.getpid(),
                      try_number=self.workload.try_number)  # fmt: skip
        try:
            outcome, status, why = self._supervise(attempt)
        except lifecycle.WarmStop:  # a second stop request: now
            orm.end_interrupted_work()  # it may have cut a write short: no lock left behind
            launcher.stop_children(grace=0)
            outcome = self._task_run.outcome if self._task_run is not None else None
            run = self._task_run
            if run is not None and run.timed_out and run.why:  # in its failure callbacks
                attempt.event("stopped: the worker is shutting down", level="warning")
                self._finish(TaskState.FAILED, run.why, attempt)
                raise
            if outcome is None:
                attempt.event("stopped: the worker is shutting down", level="warning")
                self._finish(TaskState.FAILED, "stopped because spawnflow shut down", attempt)
                raise
            # The try had ended; only its callbacks were cut short: its outcome stands.
            attempt.event("stopped during the task's callbacks: the worker is shutting "
                          "down; the try's outcome stands", level="warning")  # fmt: skip
            if outcome.deferral is not None:
                self._defer(outcome, attempt)
            else:
                self._finish(*self._ending(outcome, None, None), attempt)
            raise
        if why == "external":
            attempt.event("stopped: the task instance was changed from outside", level="warning")
            attempt.close()
            released = self.recorder.release()
            self._upload_log()
            return released
        if why is None and outcome is not None and outcome.deferral is not None:
            return self._defer(outcome, attempt)
        return self._finish(*self._ending(outcome, status, why), attempt)

    def _ending(self, outcome: TaskOutcome | None, status: ExitStatus | None,
                why: str | None) -> tuple[str, str | None]:  # fmt: skip
        """The state and reason a try ends with: the supervisor's ``why`` if it stopped
        the task before its outcome came, else the outcome (a branch's choice may still
        fail it), else how the task process ended."""
        if why is not None:
            return TaskState.FAILED, why
        if outcome is not None and outcome.state == TaskState.SUCCESS:
            if outcome.follow is not None:  # a branch: what it skips is decided here
                reason = self.recorder.choose(outcome.follow)
                return (TaskState.FAILED, reason) if reason else (TaskState.SUCCESS, None)
            return TaskState.SUCCESS, None
        if outcome is not None:
            return TaskState.FAILED, outcome.reason
        return TaskState.FAILED, _died(status)

    def _defer(self, outcome: TaskOutcome, attempt: AttemptLog) -> str:
        """The task deferred: record its trigger; the worker is free at once."""
        deferral = outcome.deferral
        assert deferral is not None  # only a deferring outcome comes here
        recorded = self.recorder.defer(deferral)
        if recorded is not None:
            attempt.event("deferral recorded; the worker is free", trigger=deferral.classpath,
                          resumes_at=deferral.method_name, timeout=deferral.timeout)  # fmt: skip
        attempt.close()
        self._upload_log()
        self.deferral = deferral
        return recorded or self.recorder.state_now()

    def _finish(self, state: str, reason: str | None, attempt: AttemptLog) -> str:
        """Record how the try ended (a failure with tries left becomes up_for_retry)."""
        recorded = self.recorder.finish(state, reason)
        if recorded is not None:
            attempt.event("task finished", level=_END_LEVELS.get(recorded, "info"),
                          state=recorded, reason=reason)  # fmt: skip
        attempt.close()
        self._upload_log()
        self.reason = reason
        return recorded or self.recorder.state_now()

    def _upload_log(self) -> None:
        """Copy the try's log to ``[logging] remote_base_url``, once the try's state is
        written: a copy that fails is logged, and changes nothing of the try."""
        if not remote_logs.enabled(self.settings) or Path(self.workload.log_file).is_absolute():
            return  # off, or a log of its own (tasks test, tasks render): not a try's
        key = remote_logs.key_of(self.workload.log_file)
        try:
            url = remote_logs.upload(self.settings, self.log_path, key)
        except Exception as error:  # noqa: BLE001 - any filesystem's own errors
            log.warning("could not copy the try's log to remote storage",
                        url=remote_logs.url_of(self.settings, key),
                        error=f"{type(error).__name__}: {error}")  # fmt: skip
            return
        log.info("try's log copied to remote storage", url=url)

    # -- the wait loop --------------------------------------------------------------

    def _supervise(self, attempt: AttemptLog):
        """Serve the task process until it ends; (outcome, exit status, why it was stopped)."""
        spec = launcher.ChildSpec(
            "task", self.target, {"workload": self.workload}, settings=self.settings,
            log_file=self.log_path, capture_output=True,
            kill_with_parent=True,  # user code must not outlive a worker that died
        )  # fmt: skip
        try:
            runner = self._xcom_runner(attempt)
        except Exception as error:  # noqa: BLE001 - an in-worker backend failed to load
            reason = f"the XCom backend could not be loaded: {type(error).__name__}: {error}"
            attempt.event("task not started", level="error", reason=reason)
            return None, None, reason
        self.alive()
        child = launcher.launch(spec, method=self.method)
        attempt.task_pid = child.pid
        self.recorder.set_task_pid(child.pid)
        self.alive()
        self.xcom_service = self._xcom_service(child, runner, attempt)
        try:
            ended = self._serve_until_done(child, attempt)
            outcome, status, why = ended
            if self._task_run is not None and self._task_run.timed_out and why:
                self._call_back_failure(attempt, why, "timeout")
            elif outcome is None and why is None:  # it died on its own, before reporting
                self._call_back_failure(attempt, _died(status), "died")
        except BaseException:  # a stop right now: the helper goes too, nothing waits
            if runner is not None:
                runner.stop(grace=0)
            raise
        if self.xcom_service is not None:
            self.xcom_service.task_ended = True
        if runner is not None:
            self._finish_xcom_calls(runner)
        return ended

    def _serve_until_done(self, child: launcher.Child, attempt: AttemptLog):
        """The task process's part of the watch: its messages, output, deadline, exit."""
        timeout = self.workload.execution_timeout
        run = self._task_run = _TaskRun()

        # execution_timeout bounds execute() alone, as Airflow's does: the task process
        # says when it starts and when it returns. The Dag file's import, which on a
        # busy machine under spawn can take longer than a short execution_timeout, has
        # the Dag processor's limit for a file on top. What runs around execute (its
        # templates, pulled arguments, on_execute_callback, the push of its return
        # value) has the longer of the callbacks' budget and execution_timeout, so that
        # a hang there still ends the try and no try that the old, shared budget let
        # through fails. Without an execution_timeout nothing is bounded before the
        # outcome, as before.
        importing = self.settings.dag_processor.file_parsing_timeout
        around = max(self.settings.core.callback_timeout, timeout or 0.0)
        budgets = {TaskStarting: ("preparing", around), ExecuteStarting: ("executing", timeout),
                   ExecuteEnded: ("storing", around)}  # fmt: skip

        def on_ready(watched: Watched) -> None:
            if timeout:
                watched.set_deadline(importing + timeout)

        def on_message(watched: Watched, message: wire.Message) -> None:
            if type(message) in budgets:
                run.phase, budget = budgets[type(message)]
                if timeout:
                    watched.set_deadline(budget)
                return
            outcome = self._serve(child, message)
            if outcome is not None:
                run.outcome = outcome
                # The try ended; the task's callbacks run now, on a budget of their own.
                watched.set_deadline(self.settings.core.callback_timeout)

        def on_output(watched: Watched, stream: str, data: bytes) -> None:
            attempt.output(stream, data)

        def on_exit(watched: Watched, status: ExitStatus) -> None:
            run.status = status
            if (
                run.outcome is not None
                and run.why is None
                and not run.stopped_after_outcome
                and (status.killed or status.exitcode != 0)
            ):
                # The try's outcome came first and stands; what ended the process
                # afterwards (a callback that exits, a crash in native code) is news.
                attempt.event("the task process died after it reported the try's outcome, "
                              "in the task's callbacks; the outcome stands", level="warning",
                              status=status.describe(meaning=False),
                              outcome=run.outcome.state)  # fmt: skip

        def on_deadline(watched: Watched) -> None:
            if run.outcome is not None:  # the callbacks ran over: the outcome stands
                attempt.event("the task's callbacks did not end within [core] "
                              "callback_timeout: stopping the task process", level="error",
                              callback_timeout=self.settings.core.callback_timeout)  # fmt: skip
                run.stopped_after_outcome = True
                self.watch.stop(watched, grace=min(self.settings.core.stop_grace_period, 10.0))
                return
            assert timeout is not None  # only execution_timeout sets the deadline
            overran = _overran(run.phase, timeout, importing, around)
            self._stop_for_timeout(watched, attempt, overran)
            run.why = run.why or overran
            run.timed_out = True

        def on_boot_failure(watched: Watched, error: ChildBootError) -> None:
            run.status = child.exit_status
            run.why = run.why or f"the task process could not start: {str(error).rstrip('.')}"

        watched = self.watch.add(
            child, on_ready=on_ready, on_message=on_message, on_output=on_output,
            on_exit=on_exit, on_deadline=on_deadline, on_boot_failure=on_boot_failure,
        )  # fmt: skip
        interval = self.settings.executor.heartbeat_interval
        self.watch.every(interval, lambda: self._beat(watched, run))
        stop_by = None
        while run.status is None:
            self.watch.wait(timeout=None if stop_by is None else stop_by - time.monotonic())
            stopping = run.why is not None or run.stopped_after_outcome
            if not stopping and lifecycle.stop_requested.is_set() and run.status is None:
                # The worker is stopping: the task (or, once it reported its outcome,
                # its callbacks) gets most of the grace period to finish; the rest is
                # for stopping it and recording how the try ended, before the
                # scheduler's own grace period ends.
                grace = self.settings.core.stop_grace_period
                stop_by = stop_by or time.monotonic() + 0.7 * grace
                if time.monotonic() >= stop_by:
                    self.watch.stop(watched, grace=0.1 * grace)
                    if run.outcome is not None:  # the try ended: its outcome stands
                        attempt.event("stopped during the task's callbacks: spawnflow is "
                                      "shutting down; the try's outcome stands",
                                      level="warning", outcome=run.outcome.state)  # fmt: skip
                        run.stopped_after_outcome = True
                    else:
                        attempt.event("stopped: spawnflow is shutting down", level="warning")
                        run.why = "stopped because spawnflow shut down before the task finished"
            stopping = run.why is not None or run.stopped_after_outcome
            if stopping and run.status is None and child.exit_status is not None:
                run.status = child.exit_status  # stopped by us: its exit is known
        if run.timed_out and run.why is not None:
            how = "killed" if run.status is not None and run.status.cold else "stopped"
            run.why += f"; the task process was {how}"
        return run.outcome, run.status, run.why

    def _call_back_failure(self, attempt: AttemptLog, reason: str, cause: str) -> None:
        """The task was stopped on its execution_timeout, or its process died, so it
        could not call its failure callbacks: as Airflow does, call them, in a fresh
        task process that imports the Dag file, within the Dag processor's
        file_parsing_timeout plus ``[core] callback_timeout``. The try's state is
        recorded after, as it was decided: the callbacks change nothing. Not while
        spawnflow shuts down."""
        if not _FAILURE_CALLBACKS & set(self.workload.callbacks):
            return
        if lifecycle.stop_requested.is_set():
            return
        spec = launcher.ChildSpec(
            "task", FAILURE_CALLBACKS_TARGET,
            {"workload": self.workload, "reason": reason, "cause": cause},
            settings=self.settings, log_file=self.log_path,
            capture_output=True, kill_with_parent=True,
        )  # fmt: skip
        attempt.event("calling the task's failure callbacks in a new task process")
        child = launcher.launch(spec, method=self.method)
        budget = self.settings.dag_processor.file_parsing_timeout
        budget += self.settings.core.callback_timeout
        grace = min(self.settings.core.stop_grace_period, 10.0)
        ended: list[ExitStatus] = []

        def on_ready(watched: Watched) -> None:
            watched.set_deadline(budget)

        def on_message(watched: Watched, message: wire.Message) -> None:
            if isinstance(message, wire.Request):  # a Variable, a Connection, an XCom
                try:
                    child.channel.send(self._answer_safely(message))
                except (OSError, ValueError):
                    pass  # it died before reading its answer

        def on_deadline(watched: Watched) -> None:
            attempt.event("the task's failure callbacks did not end within [dag_processor] "
                          "file_parsing_timeout plus [core] callback_timeout: stopping "
                          "them", level="error", seconds=budget)  # fmt: skip
            self.watch.stop(watched, grace=grace)

        def on_boot_failure(watched: Watched, error: ChildBootError) -> None:
            attempt.event("the task's failure callbacks could not start", level="error",
                          error=str(error))  # fmt: skip

        watched = self.watch.add(
            child, on_ready=on_ready, on_message=on_message, on_deadline=on_deadline,
            on_boot_failure=on_boot_failure, on_exit=lambda _w, status: ended.append(status),
            on_output=lambda _w, stream, data: attempt.output(stream, data),
        )  # fmt: skip
        # A warm stop meanwhile cuts them short; the try's state is recorded all the same.
        self.watch.until(lambda: bool(ended) or child.exit_status is not None
                         or lifecycle.stop_requested.is_set(), poll=0.2)  # fmt: skip
        if not ended and child.exit_status is None:
            self.watch.stop(watched, grace=0.1 * self.settings.core.stop_grace_period)
            self.watch.until(lambda: bool(ended) or child.exit_status is not None, timeout=30)

    def _beat(self, watched: Watched, run: _TaskRun) -> None:
        """The heartbeat turn: the task instance's, and the worker's to its executor.
        It goes on while the task process is being stopped: a stop may take its grace."""
        self.alive()
        if not self.recorder.heartbeat() and run.why is None and run.status is None:
            run.why = "external"
            self.watch.stop(watched, grace=min(self.settings.core.stop_grace_period, 10.0))

    def _serve(self, child: launcher.Child, message: wire.Message) -> TaskOutcome | None:
        """Answer one message of the task process; its outcome if it sent it."""
        if isinstance(message, TaskOutcome):
            return message
        if isinstance(message, XComPush | XComPull) and self.xcom_service is not None:
            self.xcom_service.handle(message)  # answered now, or when the backend's call ends
            return None
        if isinstance(message, wire.Request):
            answer = self._answer_safely(message)
            try:
                child.channel.send(answer)
            except (OSError, ValueError):
                pass  # the task died before reading its answer
        return None

    def _answer(self, request: wire.Request) -> wire.Response:
        """Answer a request of the task process (or of its XCom helper)."""
        return self.recorder.answer(request)

    # -- XComs ------------------------------------------------------------------------

    def _xcom_runner(self, attempt: AttemptLog) -> Any:
        """What runs the XCom backend's calls: None (database, or a recorder that keeps
        XComs itself), else a helper started lazily, or the backend in this process."""
        if not self.recorder.stores_xcoms:
            return None
        workload = self.workload
        context = {"dag_id": workload.dag_id, "run_id": workload.run_id,
                   "task_id": workload.task_id, "try_number": workload.try_number}  # fmt: skip
        return runner_for(
            self.settings, self.xcom_backend, watch=self.watch, context=context,
            answer_request=self._answer_safely, on_event=attempt.event,
        )  # fmt: skip

    def _xcom_service(self, child: launcher.Child, runner: Any, attempt: AttemptLog):
        if not self.recorder.stores_xcoms:
            return None  # the recorder answers XCom requests itself

        def reply(response: wire.Response) -> None:
            try:
                child.channel.send(response)
            except (OSError, ValueError):
                pass  # the task died before reading its answer

        return XComService(self.workload, self.settings, self.xcom_backend, runner,
                           self.recorder.this_try, reply, attempt.event)  # fmt: skip

    def _answer_safely(self, request: wire.Request) -> wire.Response:
        try:
            return self._answer(request)
        except exc.SQLAlchemyError as error:
            return database_error(request, error)
        except Exception as error:  # noqa: BLE001 - a typed answer, never a dead loop
            return wire.ErrorResponse(
                id=request.id, kind=ErrorKind.LOOKUP_FAILED,
                message=f"{type(request).__name__} failed: {type(error).__name__}: {error}",
            )  # fmt: skip

    def _finish_xcom_calls(self, runner: Any) -> None:
        """After the task ended: let the calls still queued end (a store in flight is
        purged again, replaced values are purged), within a grace period and
        heartbeating meanwhile; then stop the helper. A warm stop does not wait, and a
        helper still inside a call after the grace period is killed at once: a warm stop
        queued behind a hung call would only cost another grace period (Windows cannot
        interrupt a call blocked on a lock), without heartbeats."""
        grace = min(self.settings.xcom.helper_call_timeout, self.settings.core.stop_grace_period)
        if lifecycle.stop_requested.is_set():
            grace = 0.0  # the scheduler's grace period is spent already
        # The watch keeps heartbeating meanwhile.
        self.watch.until(lambda: not runner.pending(), timeout=grace)
        stuck = grace == 0 or runner.pending()
        runner.stop(grace=0 if stuck else min(self.settings.core.stop_grace_period, 5.0))

    def _stop_for_timeout(self, watched: Watched, attempt: AttemptLog, overran: str) -> None:
        """Stop the task's tree: warm now, killed after the grace period; the watch
        heartbeats meanwhile."""
        attempt.event("a deadline of the try passed: stopping the task", level="error",
                      reason=overran)  # fmt: skip
        self.watch.stop(watched, grace=min(self.settings.core.stop_grace_period, 10.0))


#: How loud a try's end is: a failure for good is an error; a try that will be retried
#: is expected, a warning (as the scheduler logs them).
_END_LEVELS: dict[str, str] = {TaskState.FAILED: "error", TaskState.UP_FOR_RETRY: "warning"}


def _assumed_backend(settings: Settings) -> BackendChoice:
    """The routing of ``[core] xcom_backend`` when nobody checked it: only the database
    backend runs here; any other goes through a helper."""
    name = settings.core.xcom_backend
    return BackendChoice(name, in_helper=name != "database")


def _overran(phase: str, timeout: float, importing: float, around: float) -> str:
    """The reason of a try stopped on its deadline in ``phase`` (see ``_TaskRun``)."""
    if phase == "executing":
        return f"execution_timeout of {timeout:g} seconds exceeded"
    if phase == "importing":
        return (
            f"the Dag file did not import within [dag_processor] file_parsing_timeout "
            f"({importing:g} seconds) plus the task's execution_timeout ({timeout:g})"
        )
    budget = f"{around:g} seconds (the longer of execution_timeout and [core] callback_timeout)"
    if phase == "preparing":
        return f"the task's templates, arguments and on_execute_callback outlasted {budget}"
    return f"the task's return value was not stored within {budget} after its execute returned"


def _died(status: ExitStatus | None) -> str:
    """The reason of a try whose task process ended before it reported."""
    how = status.describe(meaning=False) if status is not None else "ended"
    return f"the task process {how} before reporting"
