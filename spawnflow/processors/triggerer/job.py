"""The triggerer (role ``triggerer``): claims triggers and feeds them to its runner.

It owns the database; the triggers run in its child, the trigger runner (role
``trigger-runner``, no database), on one event loop. The runner starts once a trigger
waits for one, and leaves once it has run none for ``[triggerer] runner_idle_timeout``:
an idle triggerer holds no runner, as an idle executor holds no worker. Each turn:
heartbeat; write the events the runner reported; claim triggers nobody live runs (up to
``[triggerer] capacity``); start a runner if one is needed, or let an idle one go; tell
the runner to start what it now holds and cancel what it no longer does (another
triggerer took it over, or nobody waits any more); delete triggers no task waits for.
Between turns it services the runner through the watch loop, answering its state store
and lookup requests at once.

An event is written in a transaction of its own and forgotten only once committed;
after a database outage the turn runs again from its start. A runner that dies is
replaced while triggers wait (after a pause that doubles when it cannot boot; the third
failure in a row stops the triggerer with its reason) and the next one gets every
trigger again. On a warm stop the runner cancels its triggers and the triggerer
releases them, so another triggerer takes them over at once; a triggerer killed
outright is taken over once its heartbeat is ``[triggerer] heartbeat_timeout`` old.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import exc

from spawnflow.bootstrap import forkservers, launcher, lifecycle, logs, orm, outage, wire
from spawnflow.bootstrap.child import ChildBootError, ExitStatus
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.watch import Watch, Watched
from spawnflow.comms import state as state_messages
from spawnflow.comms.states import ErrorKind, JobState
from spawnflow.comms.triggers import CancelTrigger, RunTrigger, TriggerEnded, TriggerFired
from spawnflow.models import asset_events
from spawnflow.models.job import Job
from spawnflow.models.triggers import answer_state_request
from spawnflow.processors.scheduler import runs
from spawnflow.processors.triggerer import claims
from spawnflow.processors.worker.xcoms import answer_lookup

RUNNER_TARGET = "spawnflow.processors.triggerer.runner:run"
#: Runners that fail to boot one after the other before the triggerer gives up.
MAX_BOOT_FAILURES = 3
#: Seconds before an asset watcher whose trigger ended runs again (doubling, at most
#: a minute, while it keeps ending).
WATCHER_RESTART_DELAY = 5.0

log = logs.get_logger("spawnflow.triggerer")


@dataclass
class TriggererSummary:
    """What one turn did."""

    loops: int
    running: int
    claimed: int
    events: int

    @property
    def text(self) -> str:
        return f"{self.running} trigger(s) running"


class Triggerer:
    """The triggerer job; constructing one has no side effects.

    Args:
        settings: the process's settings snapshot.
        capacity: triggers it runs at once (``[triggerer] capacity`` if None).
        only_runs: run only the triggers of these Dag runs' task instances (``dags test``).
        on_loop: called with each TriggererSummary.
    """

    def __init__(self, settings: Settings, *, capacity: int | None = None,
                 only_runs: set[int] | None = None,
                 on_loop: Callable[[TriggererSummary], None] | None = None):  # fmt: skip
        self.settings = settings
        self.capacity = capacity or settings.triggerer.capacity
        self.only_runs = only_runs
        self.on_loop = on_loop
        self.job_id: int | None = None
        self.loops = 0
        self.watch = Watch()
        self.runner: launcher.Child | None = None
        #: The triggers the runner was told to run: by id, what it was told to run.
        self.sent: dict[int, tuple[str, str]] = {}
        #: Events and ends the runner reported, oldest first, not yet written.
        self.reported: list[TriggerFired | TriggerEnded] = []
        #: Asset watchers whose trigger ended: when each may run again, and its pause.
        self._restart: dict[int, tuple[float, float]] = {}
        #: Runners in a row that could not boot or died soon after, the pause before
        #: the next one, and when it may start.
        self._failures = 0
        self._relaunch_at: float | None = None
        #: Since when the runner runs no trigger and none waits; whether it is leaving.
        self._idle_since: float | None = None
        self._retiring = False
        self._bag = runs.DagBag()
        #: What this triggerer held at its last turn that reached the database.
        self._held: list[claims.Assigned] = []
        #: Whether a turn gave up on the database because of a stop request.
        self._gave_up = False

    def run(self, *, num_loops: int | None = None, until: Callable[[], bool] | None = None) -> None:
        """Run until stopped, ``num_loops`` turns, or ``until()`` says so."""
        try:
            outage.ride_out(self._register, what="registering the triggerer",
                            give_up=lifecycle.stop_requested.is_set)  # fmt: skip
        except outage.GaveUp:
            log.warning("stopped before it began: the database is out of reach")
            return
        # Its runner starts with the first trigger: this line says the triggerer is up.
        log.info("triggerer registered", job_id=self.job_id, capacity=self.capacity)
        try:
            while not lifecycle.stop_requested.is_set():
                try:
                    summary = outage.ride_out(
                        self._turn, what="running a triggerer loop",
                        give_up=lifecycle.stop_requested.is_set, meanwhile=self._between_attempts,
                    )  # fmt: skip
                except outage.GaveUp:
                    log.warning("stopping while the database is out of reach; what the "
                                "runner reported and was not written is reported again "
                                "when a triggerer runs those triggers")  # fmt: skip
                    self._gave_up = True
                    break
                if self.on_loop is not None:
                    self.on_loop(summary)
                if num_loops is not None and self.loops >= num_loops:
                    break
                if until is not None and until():
                    break
                self.watch.wait(self.settings.triggerer.poll_interval)
        except lifecycle.WarmStop:
            orm.end_interrupted_work()  # it may have cut a write short: no lock left behind
            raise
        finally:
            self._stop_runner()
            self._unregister()

    def _stop_runner(self) -> None:
        """Warm: the runner cancels its triggers (their clean-up runs) and leaves; what it
        reported until then is read from its channel, to be written before we go."""
        watched = next((w for w in self.watch.watched if w.child is self.runner), None)
        if watched is None:
            return
        runner = watched.child
        watched.on_exit = watched.on_ready = None  # no replacement, nothing more to run
        self.watch.stop(watched, grace=min(self.settings.core.stop_grace_period, 10.0))
        try:
            self.watch.until(lambda: runner.exit_status is not None, timeout=60)
        except BaseException:  # a second stop request: at once
            runner.stop(grace=0)
            raise

    def _between_attempts(self) -> None:
        """While the database is away: service the runner (a dead one is replaced), and
        give one that became ready meanwhile what this triggerer held at its last turn
        (nobody takes those over until a heartbeat timeout after the database is back,
        so they are still this triggerer's to run)."""
        self.watch.wait(0)
        self._tend_runner()
        self._sync(self._held)

    # -- one turn -------------------------------------------------------------------------

    def _turn(self) -> TriggererSummary:
        self.loops += 1
        now = runs.utcnow()
        claimed = events = 0
        timeout = self.settings.triggerer.heartbeat_timeout
        # After an outage nobody could heartbeat: the others get a heartbeat timeout from
        # the database's return before their triggers are taken over.
        back_at = outage.recovered_at()
        take_over = back_at is None or (now - back_at).total_seconds() >= timeout
        with orm.one_connection():
            with orm.session_scope() as session:
                job = session.get(Job, self.job_id)
                if job is not None:
                    job.latest_heartbeat = now
            events = self._write_reported()
            with orm.session_scope() as session:
                claimed = claims.claim(session, self._job(), self.capacity, now, timeout,
                                       self.only_runs, take_over=take_over)  # fmt: skip
            with orm.session_scope(write=False) as session:
                held = claims.assigned(session, self._job())
            if self.loops % 10 == 1:
                with orm.session_scope() as session:
                    claims.clean_unused(session)
        self._held = held
        self._tend_runner()
        self._sync(held)
        return TriggererSummary(self.loops, len(self.sent), claimed, events)

    def _write_reported(self) -> int:
        """Write what the runner reported, each in its own transaction; a report leaves
        the list only once written (an outage keeps the rest for the next attempt). One
        the database refuses for good (not an outage) is logged and dropped: it must not
        stop every trigger of this triggerer, again at each start."""
        written = 0
        limit = self.settings.core.max_xcom_size
        while self.reported:
            report = self.reported[0]
            try:
                with orm.session_scope() as session:
                    if isinstance(report, TriggerFired):
                        written += claims.submit_event(session, report, self._job(), limit)
                    elif report.error is not None:
                        claims.submit_failure(session, self._bag, report.trigger_id,
                                              report.error)  # fmt: skip
            except exc.SQLAlchemyError as error:
                if outage.is_transient(error):
                    raise
                why = str(getattr(error, "orig", None) or error)
                log.error("a trigger's report could not be written; dropped",
                          trigger_id=report.trigger_id, error=why)  # fmt: skip
            self.reported.pop(0)
        return written

    def _sync(self, held: list[claims.Assigned]) -> None:
        """Tell the runner to start what this triggerer holds and cancel the rest."""
        runner = self.runner
        if runner is None or runner.ready is None or runner.exit_status is not None:
            return  # the triggers go to the next runner, once it is ready
        if self._retiring:
            return  # it cancels what it runs and leaves: they go to the next one
        wanted = {assigned.trigger_id: assigned for assigned in held}
        for trigger_id in sorted(set(self.sent) - set(wanted)):
            self._send(CancelTrigger(trigger_id=trigger_id))
            del self.sent[trigger_id]
        now = time.monotonic()
        for trigger_id, assigned in wanted.items():
            what = (assigned.classpath, assigned.kwargs)
            if self.sent.get(trigger_id) == what:
                continue  # runs as it should
            if self._restart.get(trigger_id, (0.0, 0.0))[0] > now:
                continue  # ended a moment ago: runs again after a pause
            # New, or changed (a RunTrigger replaces the one the runner has).
            self._send(RunTrigger(
                trigger_id=trigger_id, classpath=assigned.classpath, kwargs=assigned.kwargs,
                owner=assigned.owner, asset_uri=assigned.asset_uri,
            ))  # fmt: skip
            self.sent[trigger_id] = what

    def _send(self, message: wire.Message) -> None:
        assert self.runner is not None  # _sync checked
        try:
            self.runner.channel.send(message)
        except OSError:
            pass  # the runner died: the watch reports its exit, and the next one gets all

    # -- the runner ---------------------------------------------------------------------

    def _tend_runner(self) -> None:
        """Start a runner once a trigger waits for one (after a failed runner's pause),
        and let one go that has run no trigger, with none waiting, for ``[triggerer]
        runner_idle_timeout`` (0: it stays)."""
        now = time.monotonic()
        if self.runner is None:
            if self._held and now >= (self._relaunch_at or 0.0):
                self._launch_runner()
            return
        if self._held or self.sent or self._retiring:
            self._idle_since = None
            return
        if self._idle_since is None:
            self._idle_since = now
        limit = self.settings.triggerer.runner_idle_timeout
        watched = next((w for w in self.watch.watched if w.child is self.runner), None)
        if not limit or now - self._idle_since < limit or watched is None:
            return
        self._retiring = True
        log.info("trigger runner idle; letting it go", runner_pid=self.runner.pid,
                 idle_seconds=round(now - self._idle_since, 1))  # fmt: skip
        self.watch.stop(watched)

    def _launch_runner(self) -> None:
        spec = launcher.ChildSpec(
            "trigger-runner", RUNNER_TARGET, settings=self.settings,
            kill_with_parent=True,  # user code must not outlive its triggerer
        )  # fmt: skip
        self.runner = launcher.launch(spec)
        self._ready_at = time.monotonic()
        self.sent.clear()
        self.watch.add(self.runner, on_ready=self._on_ready, on_message=self._on_message,
                       on_exit=self._on_exit, on_boot_failure=self._on_boot_failure)  # fmt: skip
        log.info("trigger runner started", runner_pid=self.runner.pid, method=self.runner.method)

    def _on_ready(self, watched: Watched) -> None:
        self._ready_at = time.monotonic()
        self._sync(self._held)  # what waits for it, now rather than at the next turn

    def _on_message(self, watched: Watched, message: wire.Message) -> None:
        if isinstance(message, TriggerFired | TriggerEnded):
            if isinstance(message, TriggerEnded):
                self._ended(message)
            self.reported.append(message)
        elif isinstance(message, wire.Request):
            answer = self._answer(message)
            try:
                watched.child.channel.send(answer)
            except OSError:
                pass  # the runner died before reading it
        else:
            log.warning("unexpected message from the trigger runner",
                        message=type(message).__name__)  # fmt: skip

    def _ended(self, message: TriggerEnded) -> None:
        """A trigger's run() ended; a watcher's runs again after a pause."""
        self.sent.pop(message.trigger_id, None)
        _, pause = self._restart.get(message.trigger_id, (0.0, WATCHER_RESTART_DELAY / 2))
        pause = min(60.0, pause * 2)
        self._restart[message.trigger_id] = (time.monotonic() + pause, pause)
        if message.error is not None:
            log.warning("trigger failed", trigger_id=message.trigger_id, error=message.error)

    def _answer(self, request: wire.Request) -> wire.Response:
        """A state store request of an asset watcher, or a Variable or Connection lookup."""
        try:
            if isinstance(request, state_messages.REQUESTS):
                return self._answer_state(request)
            return answer_lookup(request)
        except (exc.SQLAlchemyError, orm.DatabaseUnavailable) as error:
            message = f"the database could not answer: {error}"
            return wire.ErrorResponse(id=request.id, kind=ErrorKind.DATABASE_ERROR, message=message)

    def _answer_state(self, request: wire.Request) -> wire.Response:
        ref: state_messages.StateRef = request.ref  # type: ignore[attr-defined]
        with orm.session_scope() as session:
            asset = asset_events.find_asset(session, ref.owner[0]) if ref.owner else None
            if ref.scope != state_messages.ASSET or asset is None:
                return wire.ErrorResponse(
                    id=request.id, kind=ErrorKind.STATE_STORE_ERROR,
                    message=f"a trigger may use its asset's state store only, not {ref.owner}",
                )  # fmt: skip
            return answer_state_request(session, request, asset_id=asset.id,
                                        max_size=self.settings.core.max_xcom_size)  # fmt: skip

    def _forget_runner(self) -> bool:
        """The runner is gone (it exited, or never booted): nothing runs what was sent
        to it, and under forkserver the server of ours that forked it goes too. Whether
        it was let go while idle."""
        self.runner = None
        self.sent.clear()
        self._idle_since = None
        forkservers.let_go("trigger-runner")
        retired, self._retiring = self._retiring, False
        return retired

    def _on_exit(self, watched: Watched, status: ExitStatus) -> None:
        """The runner died: another starts while triggers wait, after a pause if this one
        lived only briefly (a trigger that crashes its process must not make a tight
        loop); or an idle one left."""
        if self._forget_runner():
            self._failures = 0  # it booted and ran: no failure
            log.debug("idle trigger runner left", status=status.describe())
            return
        lived = time.monotonic() - self._ready_at
        self._failures = self._failures + 1 if lived < 10.0 else 0
        pause = 0.0 if not self._failures else min(60.0, 2.0 ** (self._failures - 1))
        self._relaunch_at = time.monotonic() + pause
        log.warning("trigger runner ended; another starts for what waits", status=status.describe(),
                    pause_seconds=pause)  # fmt: skip

    def _on_boot_failure(self, watched: Watched, error: ChildBootError) -> None:
        """A runner that could not boot: another after a pause that doubles (1 s, 2 s),
        unless they keep failing. One let go while it booted (idle already) is no failure."""
        if self._forget_runner():
            log.debug("idle trigger runner let go before it booted", error=str(error))
            return
        self._failures += 1
        log.warning("trigger runner could not boot", error=str(error),
                    failures_in_a_row=self._failures)  # fmt: skip
        if self._failures >= MAX_BOOT_FAILURES:
            raise error  # the settings or the machine are wrong: say so, do not loop
        self._relaunch_at = time.monotonic() + 2.0 ** (self._failures - 1)

    # -- the job row --------------------------------------------------------------------

    def _job(self) -> int:
        assert self.job_id is not None  # run() registers before the first turn
        return self.job_id

    def _register(self) -> None:
        with orm.session_scope() as session:
            job = Job(job_type=claims.JOB_TYPE, state=JobState.RUNNING,
                      hostname=socket.gethostname(), pid=os.getpid())  # fmt: skip
            session.add(job)
            session.flush()
            self.job_id = job.id

    def _unregister(self) -> None:
        """Mark the job stopped and let go of its triggers; never in the way of the exit."""

        def write() -> None:
            self._write_reported()  # events the runner reported before it stopped
            with orm.session_scope() as session:
                job = session.get(Job, self.job_id)
                if job is not None:
                    job.state, job.end_date = JobState.STOPPED, runs.utcnow()
                claims.release(session, self._job())

        try:
            # Once a stop gave up on the database, one attempt: the grace period is spent.
            tolerance = 0 if self._gave_up else min(10.0, self.settings.database.outage_tolerance)
            outage.ride_out(write, what="recording that the triggerer stopped",
                            tolerance=tolerance)  # fmt: skip
        except (exc.SQLAlchemyError, orm.DatabaseUnavailable) as error:
            log.warning("could not record that the triggerer stopped", error=str(error))


def run(channel: wire.Channel, only_runs: list[int] | None = None) -> None:
    """Entry point of a launched ``triggerer`` child (``spawnflow standalone``; ``dags
    test`` runs one for its own run's triggers only)."""
    from spawnflow.bootstrap import settings as settings_module
    from spawnflow.comms import ComponentStatus

    def report(summary: TriggererSummary) -> None:
        channel.send(ComponentStatus(role="triggerer", loops=summary.loops,
                                     idle=summary.running == 0, text=summary.text))  # fmt: skip

    lifecycle.defer_warm_stop()
    only = None if only_runs is None else set(only_runs)
    Triggerer(settings_module.current(), only_runs=only, on_loop=report).run()


def fire_once(settings: Settings, classpath: str, kwargs: str,
              timeout: float | None = None) -> tuple[str | None, str | None]:  # fmt: skip
    """Run one trigger in a trigger runner of its own until its first event, without
    the database's trigger rows (``tasks test``). (the event's payload, None) once it
    fired, or (None, why not) if it failed, ended or timed out."""
    watch = Watch()
    outcome: list[tuple[str | None, str | None]] = []

    def on_message(watched: Watched, message: wire.Message) -> None:
        if isinstance(message, TriggerFired):
            outcome.append((message.payload, None))
        elif isinstance(message, TriggerEnded):
            outcome.append((None, message.error or "it ended without an event"))
        elif isinstance(message, wire.Request):
            watched.child.channel.send(answer_lookup(message))

    def on_ready(watched: Watched) -> None:
        watched.child.channel.send(RunTrigger(trigger_id=1, classpath=classpath, kwargs=kwargs,
                                              owner="tasks test"))  # fmt: skip

    def on_exit(watched: Watched, status: ExitStatus) -> None:
        outcome.append((None, f"the trigger runner {status.describe(meaning=False)}"))

    spec = launcher.ChildSpec("trigger-runner", RUNNER_TARGET, settings=settings,
                              kill_with_parent=True)  # fmt: skip
    runner = launcher.launch(spec)
    watch.add(runner, on_ready=on_ready, on_message=on_message, on_exit=on_exit)
    try:
        if not watch.until(lambda: bool(outcome) or lifecycle.stop_requested.is_set(),
                           timeout=timeout):  # fmt: skip
            return None, f"the trigger did not fire within the deferral's timeout ({timeout:g} s)"
        return outcome[0] if outcome else (None, "stopped before the trigger fired")
    finally:
        runner.stop(grace=min(settings.core.stop_grace_period, 5.0))
