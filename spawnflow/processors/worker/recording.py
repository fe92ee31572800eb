"""Where a supervisor records a try: its task instance row, or nowhere (``tasks test``).

:class:`DatabaseRecorder` writes the try's life to its task instance: running, the task
process's pid, heartbeats, how it ended. Every write is conditional on the row still
being in this try (state and try number): a try that was cleared, failed from outside
or handed to another worker is never overwritten by a supervisor that has not noticed
yet. A supervisor is given another recorder instead of being subclassed.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import CursorResult, exc, update

from spawnflow.bootstrap import logs, orm, outage, wire
from spawnflow.bootstrap import settings as settings_module
from spawnflow.comms.state import REQUESTS as STATE_REQUESTS
from spawnflow.comms.states import TaskState
from spawnflow.comms.tasks import Deferral, Follow, Workload
from spawnflow.models import asset_events
from spawnflow.models.run import TaskInstance
from spawnflow.models.triggers import NO_DEFERRAL, Trigger, answer_state_request, end_deferral
from spawnflow.processors.worker import skipping
from spawnflow.processors.worker.xcoms import answer_lookup

T = TypeVar("T")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class TryRecorder:
    """What a supervisor needs from where it records a try; this one records nothing."""

    #: XComs go to the configured backend (the database, or a helper's); False: the
    #: recorder answers XComPush and XComPull itself, through :meth:`answer`.
    stores_xcoms = True

    def start(self) -> str | None:
        """Claim the try; None if it is ours to run, else the state it is in instead."""
        return None

    def set_task_pid(self, pid: int) -> None:
        """The task process runs as ``pid``."""

    def heartbeat(self) -> bool:
        """The try is alive; False if someone changed it from outside meanwhile."""
        return True

    def finish(self, state: str, reason: str | None) -> str | None:
        """How the try ended; the state recorded, or None if it was not ours any more."""
        return state

    def choose(self, follow: Follow) -> str | None:
        """A branch or short-circuit task chose ``follow``: decide which task instances
        :meth:`finish` skips with its success; the reason to fail the try instead (an
        id its Dag does not have). Nothing to skip here: there is no run."""
        return None

    def defer(self, deferral: Deferral) -> str | None:
        """The task handed its waiting to a trigger; ``deferred``, or None if the try
        was not ours any more."""
        return TaskState.DEFERRED

    def release(self) -> str:
        """After an outside change stopped the task; the state it is left in."""
        return TaskState.NONE

    def state_now(self) -> str:
        """Its state, when :meth:`finish` found it changed from outside."""
        return TaskState.NONE

    def this_try(self, *states: str) -> tuple:
        """The WHERE clause of a write that must only touch this try's row."""
        return ()

    def answer(self, request: wire.Request) -> wire.Response:
        """Answer a lookup of the task process or its XCom helper (Variables, Connections)
        and the task's state store requests."""
        if isinstance(request, STATE_REQUESTS):
            return self.answer_state(request)
        return answer_lookup(request)

    def answer_state(self, request: wire.Request) -> wire.Response:
        """A state store request of the task: its task instance's rows."""
        limit = settings_module.current().core.max_xcom_size
        with orm.session_scope() as session:
            return answer_state_request(
                session, request, task_instance_id=self.state_owner(), max_size=limit
            )

    def state_owner(self) -> int:
        """The task instance whose state store the task uses."""
        raise NotImplementedError


class DatabaseRecorder(TryRecorder):
    """Records a try in its task instance row."""

    #: The longest wait between two heartbeats the database refused, in seconds.
    MAX_BACKOFF = 30.0

    def __init__(self, workload: Workload, alive: Callable[[], None] | None = None):
        self.workload = workload
        #: Tells the executor the worker lives while a write waits out an outage.
        self.alive = alive
        self._beat_failures = 0
        self._next_try = 0.0
        self._state_seen: str = TaskState.NONE
        #: What a branch or short-circuit task skips when it succeeds: ids and reason.
        self._skips: tuple[list[str], str] = ([], "")

    def _start(self) -> str | None:
        """Mark the task instance running; its state instead if it is no longer queued."""
        workload = self.workload
        with orm.session_scope() as session:
            ti = session.get(TaskInstance, workload.ti_id, with_for_update=True)
            if ti is None:
                return TaskState.NONE
            if self._wrote_last(ti, TaskState.RUNNING):
                return None  # our own write committed, but its answer was lost in an outage
            # A deferred try resumes in the same try; any other starts the next one.
            resumes = workload.next_method is not None
            if ti.state != TaskState.QUEUED or ti.try_number + (not resumes) != workload.try_number:
                return ti.state
            now = utcnow()
            ti.state = TaskState.RUNNING
            ti.try_number = workload.try_number
            ti.start_date, ti.end_date, ti.duration = now, None, None
            ti.hostname, ti.worker_pid, ti.last_heartbeat = socket.gethostname(), os.getpid(), now
            ti.reason = None
        return None

    def _finish(self, state: str, reason: str | None) -> str | None:
        """Write how the try ended (a failure with tries left becomes up_for_retry)."""
        now = utcnow()
        with orm.session_scope() as session:
            ti = session.get(TaskInstance, self.workload.ti_id, with_for_update=True)
            if ti is not None and self._wrote_last(ti, *TaskState.FINISHED, TaskState.UP_FOR_RETRY):
                return ti.state  # our own write committed, but its answer was lost
            if (
                ti is None or ti.state != TaskState.RUNNING
                or ti.try_number != self.workload.try_number
            ):  # fmt: skip
                self._state_seen = ti.state if ti else TaskState.NONE  # changed meanwhile
                return None
            if state == TaskState.FAILED and ti.try_number <= ti.max_tries:
                state = TaskState.UP_FOR_RETRY
                ti.next_try_at = now + dt.timedelta(seconds=self.workload.retry_wait())
            ti.state, ti.reason, ti.end_date = state, reason, now
            if state == TaskState.SUCCESS:  # with the success, or a pass could run them
                skipping.skip(session, ti.dag_run_id, *self._skips, now=now)
            end_deferral(ti)  # a resumed try ended: the next one starts from the beginning
            workload = self.workload
            if state == TaskState.SUCCESS:  # its outlets were updated: in this transaction
                for uri in workload.outlets:
                    asset_events.record_event(
                        session, asset_events.asset_for(session, uri),
                        partition_key=workload.partition_key,
                        source=(workload.dag_id, workload.run_id, workload.task_id),
                    )  # fmt: skip
            ti.duration = (now - _aware(ti.start_date)).total_seconds() if ti.start_date else None
            ti.task_pid = None
        return state

    def _defer(self, deferral: Deferral) -> str | None:
        """Mark the task instance deferred, waiting for a new trigger row."""
        now = utcnow()
        with orm.session_scope() as session:
            ti = session.get(TaskInstance, self.workload.ti_id, with_for_update=True)
            if ti is not None and self._wrote_last(ti, TaskState.DEFERRED):
                return ti.state  # our own write committed, but its answer was lost
            if (
                ti is None or ti.state != TaskState.RUNNING
                or ti.try_number != self.workload.try_number
            ):  # fmt: skip
                self._state_seen = ti.state if ti else TaskState.NONE  # changed meanwhile
                return None
            trigger = Trigger(classpath=deferral.classpath, kwargs=deferral.trigger_kwargs)
            session.add(trigger)
            session.flush()
            ti.state, ti.trigger_id = TaskState.DEFERRED, trigger.id
            ti.task_pid, ti.reason = None, None
            ti.next_method, ti.next_kwargs = deferral.method_name, deferral.next_kwargs
            timeout = deferral.timeout
            ti.trigger_timeout = None if timeout is None else now + dt.timedelta(seconds=timeout)
        return TaskState.DEFERRED

    def defer(self, deferral: Deferral) -> str | None:
        return self._ride_out(lambda: self._defer(deferral), "recording the deferral")

    def choose(self, follow: Follow) -> str | None:
        return self._ride_out(lambda: self._choose(follow), "reading the Dag for a branch")

    def _choose(self, follow: Follow) -> str | None:
        with orm.session_scope() as session:
            doc = skipping.read_dag(session, self.workload.dag_id)
        if doc is None or self.workload.task_id not in doc.task_index:
            return None  # the Dag changed meanwhile: the scheduler retires what it lost
        try:
            self._skips = skipping.plan(doc, self.workload.task_id, follow)
        except skipping.UnknownChoice as error:
            return str(error)
        return None

    def state_owner(self) -> int:
        return self.workload.ti_id

    def state_now(self) -> str:
        return self._state_seen

    def _wrote_last(self, ti: TaskInstance, *states: str) -> bool:
        """Whether ``ti`` holds what this process wrote: a write runs again when its
        COMMIT got no answer (the connection dropped), though the server may have
        committed it; only this try's worker sets its host and pid."""
        return (
            ti.state in states and ti.try_number == self.workload.try_number
            and ti.worker_pid == os.getpid() and ti.hostname == socket.gethostname()
        )  # fmt: skip

    # Each write is one transaction, run again from its start after an outage: a try
    # that ended keeps its outcome until it is written (never run twice for want of it).

    def start(self) -> str | None:
        return self._ride_out(self._start, "marking the task instance running")

    def finish(self, state: str, reason: str | None) -> str | None:
        return self._ride_out(lambda: self._finish(state, reason), "recording how the try ended")

    def release(self) -> str:
        return self._ride_out(self._release, "releasing a try that was cleared")

    def set_task_pid(self, pid: int) -> None:
        self._ride_out(lambda: self._set_task_pid(pid), "recording the task process")

    def _ride_out(self, write: Callable[[], T], what: str) -> T:
        return outage.ride_out(write, what=what, meanwhile=self.alive)

    def this_try(self, *states: str) -> tuple:
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
                .where(*self.this_try(TaskState.RESTARTING))
                .values(state=TaskState.NONE, task_pid=None, end_date=utcnow(), **NO_DEFERRAL)
            )
            ti = session.get(TaskInstance, self.workload.ti_id)
            return ti.state if ti else TaskState.NONE

    def heartbeat(self) -> bool:
        """Record that the try is alive; False if someone changed the task instance.

        A database error is logged and counted, not fatal: the next attempt comes after
        a backoff that doubles with each failure (one beat, two, four, … at most
        :attr:`MAX_BACKOFF` seconds), and beats that keep failing for [scheduler]
        task_heartbeat_timeout let the scheduler decide, as for a worker that is gone.
        """
        if time.monotonic() < self._next_try:
            return True  # backing off after a failure
        try:
            with orm.session_scope() as session:
                result = session.execute(
                    update(TaskInstance).where(*self.this_try()).values(last_heartbeat=utcnow())
                )
        except exc.OperationalError as error:
            self._beat_failures += 1
            # The scheduler waits task_heartbeat_timeout from the database's return: beat
            # again well within it.
            limit = settings_module.current().scheduler.task_heartbeat_timeout / 4
            backoff = min(self.MAX_BACKOFF, max(1.0, limit), 2.0 ** (self._beat_failures - 1))
            self._next_try = time.monotonic() + backoff
            _log().warning("heartbeat failed; trying again after a backoff",
                           failures=self._beat_failures, backoff_seconds=backoff,
                           error=str(error.orig))  # fmt: skip
            return True
        self._beat_failures, self._next_try = 0, 0.0
        assert isinstance(result, CursorResult)  # an UPDATE's result counts its rows
        return result.rowcount == 1

    def _set_task_pid(self, pid: int) -> None:
        with orm.session_scope() as session:
            session.execute(update(TaskInstance).where(*self.this_try()).values(task_pid=pid))


def _log():
    return logs.get_logger("spawnflow.supervisor")


def _aware(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)
