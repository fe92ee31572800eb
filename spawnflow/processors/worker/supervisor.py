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
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from sqlalchemy import exc, update

from spawnflow.bootstrap import launcher, lifecycle, orm, wire
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.tasks import TaskOutcome, Workload, XComPull, XComPush
from spawnflow.models.run import TaskInstance, TaskState
from spawnflow.processors.worker.xcoms import XComService, answer_lookup, database_error
from spawnflow.xcoms import BackendChoice
from spawnflow.xcoms.calls import runner_for

TARGET = "spawnflow.processors.task_runner:run_task"
#: Seconds between two checks that the task process still runs, when its sentinel is
#: silent.
LIVENESS_INTERVAL = 0.05


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class AttemptLog:
    """The try's log file: JSON lines from the supervisor and the task's output."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._partial = {"stdout": "", "stderr": ""}

    def event(self, event: str, level: str = "info", **fields: Any) -> None:
        self._write({"event": event, "level": level, "logger": "spawnflow.supervisor", **fields})

    def output(self, stream: str, data: bytes, final: bool = False) -> None:
        """Append what the task wrote on ``stream``, one JSON line per line of text."""
        text = self._partial[stream] + data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self._partial[stream] = "" if final else lines.pop()
        for line in lines:
            if line or not final:
                self._write({"event": line.rstrip("\r"), "level": "info", "stream": stream})

    def _write(self, record: dict[str, Any]) -> None:
        record = {"timestamp": utcnow().isoformat(), "role": "supervisor", "pid": os.getpid(),
                  **record}  # fmt: skip
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        for stream, rest in self._partial.items():
            if rest:
                self.output(stream, b"", final=True)
        self._file.close()


class TaskSupervisor:
    """Runs one try; constructing one has no side effects."""

    def __init__(self, workload: Workload, settings: Settings, *, method: str | None = None,
                 xcom_backend: BackendChoice | None = None):  # fmt: skip
        self.workload = workload
        self.settings = settings
        self.method = method
        #: How to route XCom calls, as the executor checked it at start-up.
        self.xcom_backend = xcom_backend or _assumed_backend(settings)
        self.reason: str | None = None
        self.xcom_service: XComService | None = None

    def run(self) -> str:
        """Run the try and return the state the task instance ended in."""
        started = self._start()
        if started is not None:
            return started  # not ours to run (any more)
        attempt = AttemptLog(Path(self.workload.log_file))
        attempt.event("task queued to this worker", worker_pid=os.getpid(),
                      try_number=self.workload.try_number)  # fmt: skip
        try:
            outcome, status, why = self._supervise(attempt)
        except lifecycle.WarmStop:  # a second stop request: now
            launcher.stop_children(grace=0)
            attempt.event("stopped: the worker is shutting down", level="warning")
            self._finish(TaskState.FAILED, "stopped because spawnflow shut down", attempt)
            raise
        if why == "external":
            attempt.event("stopped: the task instance was changed from outside", level="warning")
            attempt.close()
            return self._release()
        if why is not None:
            state, reason = TaskState.FAILED, why
        elif outcome is not None and outcome.state == TaskState.SUCCESS:
            state, reason = TaskState.SUCCESS, None
        elif outcome is not None:
            state, reason = TaskState.FAILED, outcome.reason
        else:
            state = TaskState.FAILED
            reason = f"the task process {status.describe(meaning=False)} before reporting"
        return self._finish(state, reason, attempt)

    # -- states ---------------------------------------------------------------------

    def _start(self) -> str | None:
        """Mark the task instance running; its state instead if it is no longer queued."""
        workload = self.workload
        with orm.session_scope() as session:
            ti = session.get(TaskInstance, workload.ti_id, with_for_update=True)
            if ti is None:
                return TaskState.NONE
            if ti.state != TaskState.QUEUED or ti.try_number + 1 != workload.try_number:
                return ti.state
            now = utcnow()
            ti.state = TaskState.RUNNING
            ti.try_number = workload.try_number
            ti.start_date, ti.end_date, ti.duration = now, None, None
            ti.hostname, ti.worker_pid, ti.last_heartbeat = socket.gethostname(), os.getpid(), now
            ti.reason = None
        return None

    def _finish(self, state: str, reason: str | None, attempt: AttemptLog) -> str:
        """Write how the try ended (a failure with tries left becomes up_for_retry)."""
        now = utcnow()
        with orm.session_scope() as session:
            ti = session.get(TaskInstance, self.workload.ti_id, with_for_update=True)
            if ti is None or ti.state != TaskState.RUNNING or not self._ours(ti):
                attempt.close()
                return ti.state if ti else TaskState.NONE  # changed from outside meanwhile
            if state == TaskState.FAILED and ti.try_number <= ti.max_tries:
                state = TaskState.UP_FOR_RETRY
                ti.next_try_at = now + dt.timedelta(seconds=self.workload.retry_delay)
            ti.state, ti.reason, ti.end_date = state, reason, now
            ti.duration = (now - _aware(ti.start_date)).total_seconds() if ti.start_date else None
            ti.task_pid = None
        attempt.event("task finished", level="info" if state == "success" else "error",
                      state=state, reason=reason)  # fmt: skip
        attempt.close()
        return state

    def _ours(self, ti: TaskInstance) -> bool:
        return ti.try_number == self.workload.try_number

    def _this_try(self, *states: str):
        """The WHERE clause of a write that must only touch this try's row."""
        return (
            TaskInstance.id == self.workload.ti_id,
            TaskInstance.try_number == self.workload.try_number,
            TaskInstance.state.in_(states or (TaskState.RUNNING,)),
        )

    def _release(self) -> str:
        """After an outside change stopped the task: a cleared try may run again."""
        with orm.session_scope() as session:
            session.execute(
                update(TaskInstance)
                .where(*self._this_try(TaskState.RESTARTING))
                .values(state=TaskState.NONE, task_pid=None, end_date=utcnow())
            )
            ti = session.get(TaskInstance, self.workload.ti_id)
            return ti.state if ti else TaskState.NONE

    # -- the wait loop --------------------------------------------------------------

    def _supervise(self, attempt: AttemptLog):
        """Serve the task process until it ends; (outcome, exit status, why it was stopped)."""
        spec = launcher.ChildSpec(
            "task", TARGET, {"workload": self.workload}, settings=self.settings,
            log_file=Path(self.workload.log_file), capture_output=True,
            kill_with_parent=True,  # user code must not outlive a worker that died
        )  # fmt: skip
        try:
            runner = self._xcom_runner(attempt)
        except Exception as error:  # noqa: BLE001 - an in-worker backend failed to load
            reason = f"the XCom backend could not be loaded: {type(error).__name__}: {error}"
            attempt.event("task not started", level="error", reason=reason)
            return None, None, reason
        child = launcher.launch(spec, method=self.method, component="executor")
        self._set_task_pid(child.pid)
        self.xcom_service = self._xcom_service(child, runner, attempt)
        try:
            ended = self._serve_until_done(child, runner, attempt)
        except BaseException:  # a stop right now: the helper goes too, nothing waits
            if runner is not None:
                runner.stop(grace=0)
            raise
        if self.xcom_service is not None:
            self.xcom_service.task_ended = True
        if runner is not None:
            self._finish_xcom_calls(runner)
        return ended

    def _serve_until_done(self, child: launcher.Child, runner: Any, attempt: AttemptLog):
        from multiprocess.connection import wait

        platform = platforms.current()
        streams = {"stdout": child.stdout, "stderr": child.stderr}
        interval = self.settings.executor.heartbeat_interval
        timeout = self.workload.execution_timeout
        began = time.monotonic()
        deadline = began + timeout if timeout else None
        next_beat = began + interval
        next_look = began
        outcome, why, exited_at, stop_by = None, None, None, None
        channel_open = True
        while True:
            now = time.monotonic()
            wake = min(next_beat, deadline or next_beat, stop_by or next_beat)
            if exited_at is not None:
                wake = min(wake, exited_at + 2.0)
            helper_wait = runner.seconds_to_deadline() if runner is not None else None
            if helper_wait is not None:
                wake = min(wake, now + helper_wait)
            objects = list(streams.values())
            if channel_open:
                objects.append(child.channel.connection)
            if exited_at is None:
                objects.append(child.sentinel)
            helper_objects = runner.wait_objects() if runner is not None else []
            ready_objects = wait(objects + helper_objects, timeout=max(0.0, wake - now))
            if runner is not None:
                runner.service()  # answers, a dead helper, a call past its timeout
            for ready in ready_objects:
                if ready in helper_objects:
                    continue
                if ready is child.channel.connection:
                    answer, channel_open = self._serve(child)
                    outcome = answer or outcome
                elif ready is not child.sentinel:
                    name = next(n for n, c in streams.items() if c is ready)
                    data = platform.read_output(ready)
                    if data:
                        attempt.output(name, data)
                    else:
                        del streams[name]
            now = time.monotonic()
            # Reading /proc on every wake-up costs more than an XCom call's hop: look
            # when the sentinel fires, and otherwise at most every LIVENESS_INTERVAL (a
            # process the task forked may hold the sentinel's pipe open after it exited;
            # the heartbeat wakes us at the latest).
            look = child.sentinel in ready_objects or now >= next_look
            if exited_at is None and look:
                next_look = now + LIVENESS_INTERVAL
                if not child.is_alive():
                    exited_at = now
            # Gone, and its output read to the end (or for two more seconds: a process
            # it left behind may hold the pipes open; reaping kills what is left).
            if exited_at is not None and (not streams or now >= exited_at + 2.0):
                while channel_open and child.channel.poll():
                    answer, channel_open = self._serve(child)
                    outcome = answer or outcome
                return outcome, child.join(timeout=30), why
            if deadline is not None and now >= deadline:
                why = self._stop_for_timeout(child, attempt, timeout)
            elif lifecycle.stop_requested.is_set():
                # The worker is stopping: the task gets most of the grace period to
                # finish; the rest is for stopping it and recording why, before the
                # scheduler's own grace period ends.
                grace = self.settings.core.stop_grace_period
                stop_by = stop_by or now + 0.7 * grace
                if now >= stop_by:
                    attempt.event("stopped: spawnflow is shutting down", level="warning")
                    child.stop(grace=0.1 * grace)
                    why = "stopped because spawnflow shut down before the task finished"
            if now >= next_beat and why is None:
                next_beat = now + interval
                if not self._heartbeat():
                    why = "external"
                    child.stop(grace=min(self.settings.core.stop_grace_period, 10.0))
            if why is not None:  # stopped and reaped above: its pipes are closed
                return outcome, child.exit_status, why

    def _serve(self, child: launcher.Child) -> tuple[TaskOutcome | None, bool]:
        """Answer one message of the task process: (its outcome if it sent it, channel open)."""
        try:
            message = child.channel.recv()
        except (EOFError, OSError):
            return None, False
        if isinstance(message, TaskOutcome):
            return message, True
        if isinstance(message, XComPush | XComPull) and self.xcom_service is not None:
            self.xcom_service.handle(message)  # answered now, or when the backend's call ends
            return None, True
        if isinstance(message, wire.Request):
            answer = self._answer_safely(message)
            try:
                child.channel.send(answer)
            except (OSError, ValueError):
                pass  # the task died before reading its answer
        return None, True

    def _answer(self, request: wire.Request) -> wire.Response:
        """Answer a request of the task process (or of its XCom helper) from the database."""
        return answer_lookup(request)

    # -- XComs ------------------------------------------------------------------------

    def _xcom_runner(self, attempt: AttemptLog) -> Any:
        """What runs the XCom backend's calls: None (database), or a helper started lazily."""
        workload = self.workload
        context = {"dag_id": workload.dag_id, "run_id": workload.run_id,
                   "task_id": workload.task_id, "try_number": workload.try_number}  # fmt: skip
        return runner_for(
            self.settings, self.xcom_backend, method=self.method, context=context,
            answer_request=self._answer_safely, on_event=attempt.event,
        )  # fmt: skip

    def _xcom_service(self, child: launcher.Child, runner: Any, attempt: AttemptLog):
        def reply(response: wire.Response) -> None:
            try:
                child.channel.send(response)
            except (OSError, ValueError):
                pass  # the task died before reading its answer

        return XComService(self.workload, self.settings, self.xcom_backend, runner,
                           self._this_try, reply, attempt.event)  # fmt: skip

    def _answer_safely(self, request: wire.Request) -> wire.Response:
        try:
            return self._answer(request)
        except exc.SQLAlchemyError as error:
            return database_error(request, error)
        except Exception as error:  # noqa: BLE001 - a typed answer, never a dead loop
            return wire.ErrorResponse(
                id=request.id, kind="LOOKUP_FAILED",
                message=f"{type(request).__name__} failed: {type(error).__name__}: {error}",
            )  # fmt: skip

    def _finish_xcom_calls(self, runner: Any) -> None:
        """After the task ended: let the calls still queued end (a store in flight is
        purged again, replaced values are purged), within a grace period and
        heartbeating meanwhile; then stop the helper. A warm stop does not wait."""
        from multiprocess.connection import wait

        grace = min(self.settings.xcom.helper_call_timeout, self.settings.core.stop_grace_period)
        if lifecycle.stop_requested.is_set():
            grace = 0.0  # the scheduler's grace period is spent already
        ends = time.monotonic() + grace
        interval = self.settings.executor.heartbeat_interval
        while runner.pending() and time.monotonic() < ends:
            wait(runner.wait_objects(), timeout=max(0.0, min(interval, ends - time.monotonic())))
            runner.service()
            self._heartbeat()
        runner.stop(grace=0 if grace == 0 else min(self.settings.core.stop_grace_period, 5.0))

    def _stop_for_timeout(self, child: launcher.Child, attempt: AttemptLog, timeout: float) -> str:
        attempt.event("execution_timeout passed: stopping the task", level="error",
                      execution_timeout=timeout)  # fmt: skip
        self._heartbeat()  # the stop may take the grace period: it starts a fresh clock
        status = child.stop(grace=min(self.settings.core.stop_grace_period, 10.0))
        how = "killed" if status.cold else "stopped"
        return f"execution_timeout of {timeout:g} seconds exceeded; the task process was {how}"

    def _heartbeat(self) -> bool:
        """Record that the try is alive; False if someone changed the task instance."""
        with orm.session_scope() as session:
            result = session.execute(
                update(TaskInstance).where(*self._this_try()).values(last_heartbeat=utcnow())
            )
            return result.rowcount == 1

    def _set_task_pid(self, pid: int) -> None:
        with orm.session_scope() as session:
            session.execute(update(TaskInstance).where(*self._this_try()).values(task_pid=pid))


def _assumed_backend(settings: Settings) -> BackendChoice:
    """The routing of ``[core] xcom_backend`` when nobody checked it: only the database
    backend runs here; any other goes through a helper."""
    name = settings.core.xcom_backend
    return BackendChoice(name, in_helper=name != "database")


def _aware(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)
