"""The scheduler's loop (role ``scheduler``): runs, task states, the executor, heartbeats.

Each turn: heartbeat; create due runs; start queued runs; decide waiting task
instances; fail tasks whose supervisor stopped heartbeating; queue what the limits
allow to the executor; handle the executor's events. Then it waits, on the
executor's connections and the stop event, for at most ``[scheduler] loop_interval``.

On start, and again every ``[scheduler] job_heartbeat_timeout``, it adopts or
resets what a scheduler that is gone left: task instances it had queued go back to
scheduled, and its running ones are failed (or retried) once their heartbeat is
stale. A warm stop queues nothing new, passes the stop on to the executor's
workers at once, and keeps the loop going while their tasks finish within
``[core] stop_grace_period`` (the workers stop what is still running a little
before it ends, so that they can record why).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import exc, func, select, update

from spawnflow.bootstrap import lifecycle, logs, orm, outage
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.states import DagRunState, JobState, TaskState
from spawnflow.comms.tasks import Workload
from spawnflow.executors import BaseExecutor, TaskEnded, WorkerLost
from spawnflow.models.job import Job
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.models.triggers import end_deferral
from spawnflow.processors.scheduler import (
    asset_runs,
    backfills,
    callbacks,
    cut_short,
    runs,
    stuck,
    waiting,
)
from spawnflow.processors.scheduler.queueing import queue_tasks

if TYPE_CHECKING:
    from spawnflow.comms.status import StatusSnapshot

log = logs.get_logger("spawnflow.scheduler")
ADOPTING = "adopting what a scheduler that is gone left"
#: Longest seconds between two heartbeats of the scheduler's job row (a quarter of
#: [scheduler] job_heartbeat_timeout when that is shorter).
HEARTBEAT_EVERY = 5.0
#: Longest seconds between two looks for running tasks whose supervisor stopped
#: heartbeating (a quarter of [scheduler] task_heartbeat_timeout when shorter).
STALE_TASKS_EVERY = 10.0
#: Longest seconds between two looks for task instances queued too long (a quarter
#: of [scheduler] task_queued_timeout when that is shorter).
STUCK_IN_QUEUED_EVERY = 10.0
#: Seconds between two looks for deferrals whose trigger timed out.
DEFERRAL_TIMEOUTS_EVERY = 1.0
#: Seconds between two looks for backfills whose runs have all finished.
BACKFILLS_EVERY = 5.0


@dataclass
class LoopSummary:
    """What one turn of the loop did."""

    loops: int
    created: int
    queued: int
    active_runs: int
    running_tasks: int
    #: Task instances waiting for a trigger (they hold no worker).
    deferred_tasks: int = 0
    #: Runs this scheduler saw end, since it started, by how they ended.
    succeeded_runs: int = 0
    failed_runs: int = 0

    @property
    def idle(self) -> bool:
        """Nothing to do and nothing running (``standalone --exit-when-idle``)."""
        return not (self.created or self.queued or self.active_runs or self.running_tasks)


class Scheduler:
    """The scheduler job; constructing one has no side effects.

    Args:
        settings: the process's settings snapshot.
        executor: where task supervisors run (a LocalExecutor by default).
        only_runs: restrict everything to these Dag run ids (``dags test``).
        on_loop: called with each LoopSummary.
    """

    def __init__(self, settings: Settings, *, executor: BaseExecutor | None = None,
                 only_runs: set[int] | None = None,
                 on_loop: Callable[[LoopSummary], None] | None = None):  # fmt: skip
        self.settings = settings
        self.executor = executor
        self.only_runs = only_runs
        self.on_loop = on_loop
        self.bag = runs.DagBag()
        #: Where the last passes left each running run (runs in which nothing changed
        #: are skipped).
        self.seen = waiting.RunsSeen()
        self.assets = asset_runs.AssetScheduling(
            settings.scheduler.max_partition_evaluations_per_loop,
            settings.scheduler.asset_partition_resync_interval,
        )
        self.job_id: int | None = None
        self.loops = 0
        #: Runs this scheduler ended, by state (``standalone --exit-when-idle``).
        self.ended_runs: Counter[str] = Counter()
        #: Executor events read but not written yet.
        self._events: list = []
        #: The children running Dag callbacks of runs that ended.
        self.dag_callbacks = callbacks.DagCallbacks(settings)
        #: Whether a turn gave up on the database because of a stop request.
        self._gave_up = False
        # Checks that need not run every loop, each on a clock of its own (see
        # _due): a loop runs as often as tasks end, up to tens of times a second.
        job_timeout = settings.scheduler.job_heartbeat_timeout
        task_timeout = settings.scheduler.task_heartbeat_timeout
        self._every = {
            "heartbeat": min(HEARTBEAT_EVERY, job_timeout / 4),
            "stale tasks": min(STALE_TASKS_EVERY, task_timeout / 4),
            "stuck in queued": min(
                STUCK_IN_QUEUED_EVERY, settings.scheduler.task_queued_timeout / 4
            ),
            "deferral timeouts": DEFERRAL_TIMEOUTS_EVERY,
            "backfills": BACKFILLS_EVERY,
        }
        self._next: dict[str, float] = {}

    def run(self, *, num_loops: int | None = None, until: Callable[[], bool] | None = None) -> None:
        """Loop until stopped, ``num_loops`` turns, or ``until()`` says so."""
        if self.executor is None:
            from spawnflow.executors import load

            self.executor = load(self.settings)  # [core] executor
        stopping = lifecycle.stop_requested.is_set
        try:
            outage.ride_out(self._register, what="registering the scheduler", give_up=stopping)
            outage.ride_out(self._adopt_or_reset, what=ADOPTING, give_up=stopping)
        except outage.GaveUp:
            log.warning("stopped before it began: the database is out of reach")
            return
        self.executor.start()
        grace = self.settings.core.stop_grace_period
        adopt_every = self.settings.scheduler.job_heartbeat_timeout
        next_adopt = time.monotonic() + adopt_every
        grace_ends = None
        unfinished: list[Workload] = []
        try:
            while True:
                if lifecycle.stop_requested.is_set() and grace_ends is None:
                    # Whoever stops us waits ``grace`` at most: leave room to end cleanly.
                    grace_ends = time.monotonic() + 0.9 * grace
                    log.info("stopping", running_tasks=self.executor.running(),
                             waits_at_most_s=round(0.9 * grace, 1))  # fmt: skip
                    self.executor.request_stop()
                try:
                    summary = self.loop_once(queue=grace_ends is None)
                except outage.GaveUp:
                    # Stopping while the database is away: no turn can run, but the
                    # workers may still finish (they wait for the database themselves).
                    if not self._gave_up:
                        log.warning("stopping while the database is out of reach; the "
                                    "workers finish what they can in the grace period")  # fmt: skip
                    self._gave_up, summary = True, None
                if self.on_loop is not None and summary is not None:
                    self.on_loop(summary)
                if num_loops is not None and self.loops >= num_loops:
                    break
                if until is not None and until():
                    break
                if grace_ends is not None and (
                    not self.executor.running() or time.monotonic() >= grace_ends
                ):
                    break
                if time.monotonic() >= next_adopt:
                    next_adopt = time.monotonic() + adopt_every
                    with contextlib.suppress(outage.GaveUp):  # stopping; the database away
                        outage.ride_out(self._adopt_or_reset, what=ADOPTING,
                                        give_up=lifecycle.stop_requested.is_set)  # fmt: skip
                self.executor.wait(self.settings.scheduler.loop_interval)
        except lifecycle.WarmStop:
            orm.end_interrupted_work()  # it may have cut a write short: no lock left behind
            unfinished += self.executor.end(grace=0)
            raise
        finally:
            unfinished += self.executor.end(grace=0.05 * grace if grace_ends is not None else None)
            # A second stop request can interrupt the loop while it writes a lost worker's
            # task (the worker went first: the stop reached it too): that task was cut
            # short by the same stop, and the executor no longer holds it.
            unfinished += [e.workload for e in self._events if isinstance(e, WorkerLost)]
            self._events = []
            self._unregister(unfinished)
            # Dag callbacks of runs that just ended get their time, unless we stop.
            budget = self.settings.core.callback_timeout
            self.dag_callbacks.finish(0.0 if grace_ends is not None else budget)

    def _unregister(self, unfinished: list[Workload]) -> None:
        """Record that this scheduler stopped, and queue again what its stop cut short;
        never in the way of the exit (a database that is gone leaves the row to go
        stale, which other schedulers understand)."""
        why = "its scheduler stopped before the task finished (a cold stop); queued again"

        def write() -> None:
            with orm.session_scope() as session:
                assert self.job_id is not None  # registered before anything was queued
                ti_ids = {workload.ti_id for workload in unfinished}
                cut_short.release(session, self.job_id, why, ti_ids)

        try:
            # Once a stop gave up on the database, one attempt: the grace period is spent.
            tolerance = 0 if self._gave_up else min(10.0, self.settings.database.outage_tolerance)
            outage.ride_out(write, what="recording that the scheduler stopped",
                            tolerance=tolerance)  # fmt: skip
        except (exc.SQLAlchemyError, orm.DatabaseUnavailable) as error:
            log.warning("could not record that the scheduler stopped", error=str(error))

    def loop_once(self, *, queue: bool = True) -> LoopSummary:
        """One turn of the loop: a few short units of work over one connection.

        A database outage is ridden out (see :mod:`~spawnflow.bootstrap.outage`): the
        turn runs again from its start once the database is back; each of its units is
        a transaction, and each decision is made again from what the database holds.
        A stop request ends the wait (:class:`~spawnflow.bootstrap.outage.GaveUp`).
        """

        attempts = 0

        def turn() -> LoopSummary:
            nonlocal attempts
            attempts += 1
            with orm.one_connection():
                if attempts > 1:
                    self._queue_again_what_never_left()
                return self._turn(queue)

        # Between attempts the executor's watch goes on: workers still boot, report and
        # get found out when hung (a worker stopped while it held SQLite's write lock
        # would otherwise hold up the whole scheduler).
        executor = self.executor
        assert executor is not None  # run() sets it before it calls loop_once()
        return outage.ride_out(turn, what="running a scheduler loop",
                               give_up=lifecycle.stop_requested.is_set,
                               meanwhile=lambda: executor.wait(0))  # fmt: skip

    def _queue_again_what_never_left(self) -> None:
        """After a failed attempt: a COMMIT that got no answer may still have committed,
        leaving task instances queued by this scheduler that it never handed to its
        executor (it hands them over only after the commit). Nobody would run them;
        they are scheduled again, their try not counted (a try counts when it starts)."""
        assert self.executor is not None  # run() sets it before it calls loop_once()
        held = self.executor.holds()
        with orm.session_scope() as session:
            stranded = [
                ti for ti in session.scalars(
                    select(TaskInstance).where(
                        TaskInstance.state == TaskState.QUEUED,
                        TaskInstance.scheduler_job_id == self.job_id,
                    ).with_for_update()
                ) if ti.id not in held
            ]  # fmt: skip
            for ti in stranded:
                ti.state, ti.scheduler_job_id = TaskState.SCHEDULED, None
        if stranded:
            log.warning("scheduled again what a commit without an answer left queued",
                        count=len(stranded))  # fmt: skip

    def _due(self, check: str) -> bool:
        """Whether ``check`` is due in this turn (the first turn runs every check). A
        turn that fails after a check was due leaves it to the check's next time: each
        check looks at what the database holds then, so it comes late, never lost."""
        now = time.monotonic()
        if now < self._next.get(check, 0.0):
            return False
        self._next[check] = now + self._every[check]
        return True

    def _turn(self, queue: bool) -> LoopSummary:
        self.loops += 1
        self.dag_callbacks.tend()
        self._take_events()  # first: a task's end is told before its run's
        now = runs.utcnow()
        with orm.session_scope() as session:
            if self._due("heartbeat"):
                self._heartbeat(session, now)
            created = (
                0 if self.only_runs is not None else runs.create_due_runs(session, self.bag, now)
            )
        if self.only_runs is None:
            with orm.session_scope() as session:
                created += self.assets.loop(session, self.bag, now)
            self.assets.committed()
        with orm.session_scope() as session:
            runs.start_queued_runs(session, self.bag, now, self.only_runs)
        ended: list[DagRun] = []
        with orm.session_scope() as session:
            waiting.schedule_tasks(session, self.bag, now, self.only_runs, self.seen, ended)
            # Read now: the session expires them at its commit.
            ended_runs = [(r.dag_id, r.run_id, r.state, r.start_date) for r in ended]
            calls = callbacks.calls_for(session, self.bag, ended)
        for dag_id, run_id, state, started in ended_runs:  # committed: they ended
            self.ended_runs[state] += 1
            seconds = round((now - runs.aware(started)).total_seconds(), 3) if started else None
            level = logging.INFO if state == DagRunState.SUCCESS else logging.ERROR
            log.log(level, "run finished", dag_id=dag_id, run_id=run_id, state=state,
                    seconds=seconds)  # fmt: skip
        # A backfill completes when its last run ends; the clock catches those whose
        # last run another scheduler ended, or this one before a crash.
        if ended_runs or self._due("backfills"):
            with orm.session_scope() as session:
                completed = backfills.complete_backfills(session, now)
            for backfill_id, dag_id in completed:
                log.info("backfill completed", dag_id=dag_id, backfill_id=backfill_id)
        self.dag_callbacks.fire(calls)  # committed: the runs ended; not waited for
        stale, deferrals = self._due("stale tasks"), self._due("deferral timeouts")
        if stale or deferrals:
            with orm.session_scope() as session:
                timeout = self.settings.scheduler.task_heartbeat_timeout
                back_at = outage.recovered_at()
                lost = (runs.fail_stale_tasks(session, self.bag, now, timeout, back_at)
                        if stale else [])  # fmt: skip
                for ti in lost:
                    log.warning("task heartbeat timed out", dag_id=ti.dag_id, task_id=ti.task_id)
                for ti in (runs.fail_timed_out_deferrals(session, self.bag, now, self.only_runs)
                           if deferrals else []):  # fmt: skip
                    log.warning("deferral timed out", dag_id=ti.dag_id, task_id=ti.task_id)
                lost_calls = callbacks.failure_calls_for(session, self.bag, lost)
            self.dag_callbacks.fire(lost_calls)  # committed: those tries ended
        if self._due("stuck in queued"):
            self._requeue_or_fail_stuck(now)
        self._handle_events()  # first: a lost worker's slot and task are known before queueing
        # run() sets both before it calls loop_once().
        assert self.executor is not None
        assert self.job_id is not None
        workloads = []
        if queue:
            with orm.session_scope() as session:
                workloads = queue_tasks(
                    session, self.bag, self.settings, self.executor.free_slots(), self.job_id,
                    now, self.only_runs,
                )  # fmt: skip
        for workload in workloads:  # after the commit: the worker must see them queued
            self.executor.queue(workload)
            log.info("task queued", dag_id=workload.dag_id, task_id=workload.task_id,
                     run_id=workload.run_id, try_number=workload.try_number)  # fmt: skip
        return self._summary(created, len(workloads))

    def _requeue_or_fail_stuck(self, now: dt.datetime) -> None:
        """Queue again, or fail, what stayed queued too long (see :mod:`.stuck`); the
        executor forgets those tries once that is committed."""
        assert self.executor is not None  # run() sets both before it calls loop_once()
        assert self.job_id is not None
        options = self.settings.scheduler
        with orm.session_scope() as session:
            again, failed = stuck.requeue_or_fail(
                session, self.job_id, now, options.task_queued_timeout,
                options.num_stuck_in_queued_retries, self.executor.sent_tries(),
                self.executor.holds(),
            )  # fmt: skip
            # Read now: the session expires them at its commit.
            told = [(ti.id, n, ti.dag_id, ti.task_id, ti.reason, gave_up)
                    for found, gave_up in ((again, False), (failed, True))
                    for ti, n in found]  # fmt: skip
        for ti_id, try_number, dag_id, task_id, reason, gave_up in told:
            self.executor.forget(ti_id, try_number)
            event = "task failed: stuck in queued" if gave_up else "task queued again"
            log.log(logging.ERROR if gave_up else logging.WARNING, event, dag_id=dag_id,
                    task_id=task_id, try_number=try_number, reason=reason)  # fmt: skip

    # -- executor events ----------------------------------------------------------------

    def _handle_events(self) -> None:
        """Write what the executor reported; an event leaves the list once written (a
        database outage in the middle keeps the rest for the next attempt)."""
        self._take_events()
        while self._events:
            event = self._events[0]
            if isinstance(event, WorkerLost):
                self._lost(event)
            self._events.pop(0)

    def _take_events(self) -> None:
        """Read what the executor reported; tasks that ended are logged now."""
        assert self.executor is not None  # run() sets it before it calls loop_once()
        found = self.executor.events()
        for event in found:
            if isinstance(event, TaskEnded) and event.workload is not None:
                _log_task_end(event)
        self._events.extend(found)

    def _lost(self, event: WorkerLost) -> None:
        now = runs.utcnow()
        calls: list[callbacks.Call] = []
        with orm.session_scope() as session:
            ti = session.get(TaskInstance, event.workload.ti_id, with_for_update=True)
            if ti is None:
                return
            if ti.try_number == event.workload.try_number and ti.task_pid and ti.start_date:
                # The task process died with its worker (parent-death signal); what it
                # started in its process group did not.
                started = runs.aware(ti.start_date).timestamp() - 1.0
                platforms.current().kill_orphaned_group(ti.task_pid, started)
                ti.task_pid = None
            if ti.state == TaskState.QUEUED:  # it never started: queue it again
                ti.state = TaskState.SCHEDULED
            elif ti.try_number != event.workload.try_number:
                return  # a later try: not this worker's
            elif ti.state == TaskState.RUNNING:
                runs.fail(
                    ti, now, f"{event.how} while it ran the task", event.workload.retry_wait()
                )
                log.warning("task lost with its worker", dag_id=ti.dag_id, task_id=ti.task_id)
                calls = callbacks.failure_calls_for(session, self.bag, [ti])
            elif ti.state == TaskState.RESTARTING:  # cleared while it ran: it may run again
                ti.state = TaskState.NONE
                end_deferral(ti)
        self.dag_callbacks.fire(calls)  # committed: the try ended

    # -- the job row ----------------------------------------------------------------------

    def _register(self) -> None:
        with orm.session_scope() as session:
            job = Job(job_type="scheduler", state=JobState.RUNNING, hostname=socket.gethostname(),
                      pid=os.getpid())  # fmt: skip
            session.add(job)
            session.flush()
            self.job_id = job.id

    def _heartbeat(self, session, now) -> None:
        job = session.get(Job, self.job_id)
        if job is not None:
            job.latest_heartbeat = now

    def _adopt_or_reset(self) -> None:
        """Take over what schedulers that are gone left queued; let the rest time out."""
        now = runs.utcnow()
        limit = self.settings.scheduler.job_heartbeat_timeout
        with orm.session_scope() as session:
            live = set(session.scalars(select(Job.id).where(
                Job.job_type == "scheduler", Job.state == JobState.RUNNING,
                Job.latest_heartbeat >= now - dt.timedelta(seconds=limit),
            )))  # fmt: skip
            # Never itself, however late its own heartbeat (a turn that took longer than
            # the timeout on a busy machine): it would reset what it just queued.
            if self.job_id is not None:
                live.add(self.job_id)
            session.execute(
                update(Job)
                .where(
                    Job.job_type == "scheduler", Job.state == JobState.RUNNING, Job.id.not_in(live)
                )
                .values(state=JobState.FAILED, end_date=now)
            )
            orphans = session.scalars(
                select(TaskInstance)
                .where(TaskInstance.state == TaskState.QUEUED)
                .with_for_update(skip_locked=True)
            ).all()
            left = [ti for ti in orphans if ti.scheduler_job_id not in live]
            # The try number each one's workload carries (as queueing._queue_one numbers it).
            sent = {ti.id: ti.try_number if ti.next_method is not None else ti.try_number + 1
                    for ti in left}  # fmt: skip
            assert self.executor is not None  # run() made it first
            adopted = self.executor.adopt(sent) if left else set()
            reset = 0
            for ti in left:
                if ti.id in adopted:
                    ti.scheduler_job_id = self.job_id
                else:
                    ti.state, ti.scheduler_job_id = TaskState.SCHEDULED, None
                    reset += 1
            if adopted:
                log.info("adopted task instances a stopped scheduler had queued",
                         count=len(adopted))  # fmt: skip
            if reset:
                log.warning("reset task instances a stopped scheduler had queued", count=reset)

    def _summary(self, created: int, queued: int) -> LoopSummary:
        runs_query = select(func.count()).where(DagRun.state.in_(DagRunState.ACTIVE))
        tasks_query = select(func.count()).where(TaskInstance.state.in_(TaskState.ACTIVE))
        deferred_query = select(func.count()).where(TaskInstance.state == TaskState.DEFERRED)
        if self.only_runs is not None:
            runs_query = runs_query.where(DagRun.id.in_(self.only_runs))
            tasks_query = tasks_query.where(TaskInstance.dag_run_id.in_(self.only_runs))
            deferred_query = deferred_query.where(TaskInstance.dag_run_id.in_(self.only_runs))
        with orm.session_scope(write=False) as session:
            active_runs, running_tasks, deferred = session.execute(
                select(
                    runs_query.scalar_subquery(),
                    tasks_query.scalar_subquery(),
                    deferred_query.scalar_subquery(),
                )
            ).one()
        return LoopSummary(self.loops, created, queued, active_runs or 0, running_tasks or 0,
                           deferred or 0, self.ended_runs[DagRunState.SUCCESS],
                           self.ended_runs[DagRunState.FAILED])  # fmt: skip


#: How loud a task's end is: a failure is an error, a try that will be retried a warning.
_END_LEVELS: dict[str, int] = {
    TaskState.FAILED: logging.ERROR,
    TaskState.UP_FOR_RETRY: logging.WARNING,
}


def _log_task_end(event: TaskEnded) -> None:
    workload = event.workload
    assert workload is not None  # the caller checked
    log.log(_END_LEVELS.get(event.state, logging.INFO), "task finished", dag_id=workload.dag_id,
            task_id=workload.task_id, run_id=workload.run_id, try_number=workload.try_number,
            state=event.state, seconds=event.seconds)  # fmt: skip


def run(channel, status_snapshots: bool = False, **kwargs) -> None:
    """Entry point of a launched ``scheduler`` child (``spawnflow standalone``).

    ``status_snapshots``: also send what ``spawnflow status`` shows, for standalone's
    live view."""
    from spawnflow.bootstrap import settings as settings_module
    from spawnflow.comms import ComponentStatus

    settings = settings_module.current()
    last_snapshot, last_counts = 0.0, (0,) * 5

    def report(summary: LoopSummary) -> None:
        nonlocal last_snapshot, last_counts
        snapshot = None
        # Once a second for the elapsed times, and at once when something started or
        # ended, so that the view's last frame shows how the runs ended.
        counts = (summary.active_runs, summary.running_tasks, summary.deferred_tasks,
                  summary.succeeded_runs, summary.failed_runs)  # fmt: skip
        if status_snapshots and (counts != last_counts or time.monotonic() - last_snapshot >= 1):
            snapshot, last_snapshot = _status_snapshot(settings), time.monotonic()
            last_counts = counts
        channel.send(ComponentStatus(
            role="scheduler", loops=summary.loops, idle=summary.idle,
            text=f"{summary.active_runs} active run(s), {summary.running_tasks} task(s) running, "
            f"{summary.deferred_tasks} deferred; runs {summary.succeeded_runs} succeeded, "
            f"{summary.failed_runs} failed",
            succeeded_runs=summary.succeeded_runs, failed_runs=summary.failed_runs,
            snapshot=snapshot,
        ))  # fmt: skip

    lifecycle.defer_warm_stop()
    Scheduler(settings, on_loop=report).run()


def _status_snapshot(settings: Settings) -> StatusSnapshot | None:
    """The status view's snapshot; None when the database does not answer (the loop
    that reads it next says so, and rides the outage out)."""
    from spawnflow.models.status import read_status

    try:
        with orm.engine().connect() as connection:
            return read_status(connection, settings)
    except (exc.SQLAlchemyError, orm.DatabaseUnavailable):
        return None
