"""The local executor: up to ``[executor] parallelism`` worker processes, on demand.

Workers are launched by the launcher under the executor's start method; each
supervises one task at a time and says it is alive every heartbeat interval. One
worker starts with the executor (a setup that cannot boot one fails at start, not at
the first task); the others start when a workload finds no idle worker, and a worker
idle for ``[executor] worker_idle_timeout`` leaves, so an idle tree holds no worker
interpreters (each is a whole one under spawn and forkserver). One
:class:`~spawnflow.bootstrap.watch.Watch` services them all: a worker that dies, or
stops answering for ``[scheduler] task_heartbeat_timeout`` (stopped warm, then cold),
has the task it ran reported lost with the reason, for the scheduler to fail or retry
it. A task's end is matched to the request that asked for it by id.
"""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING

from spawnflow.bootstrap import forkservers, launcher, lifecycle, logs
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.child import ChildBootError, ExitStatus, stop_many
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.watch import Watch, Watched
from spawnflow.comms.tasks import RunTask, TaskFinished, WorkerAlive, Workload
from spawnflow.executors import BaseExecutor, TaskEnded, WorkerLost

if TYPE_CHECKING:
    from spawnflow.xcoms import BackendChoice

TARGET = "spawnflow.processors.worker.worker:run"
#: Workers that fail to boot one after the other before the executor gives up.
MAX_BOOT_FAILURES = 3
#: Seconds before the first replacement of a worker that could not boot; it doubles
#: with each failure in a row.
BOOT_RETRY_DELAY = 1.0

log = logs.get_logger("spawnflow.executor")


class LocalExecutor(BaseExecutor):
    """Runs workloads in worker processes; constructing one starts nothing."""

    def __init__(self, settings: Settings, *, parallelism: int | None = None):
        self.settings = settings
        self.parallelism = parallelism or settings.executor.parallelism
        most = platforms.current().children_per_wait()
        if most is not None and self.parallelism > most:
            raise UserError(
                f"the local executor can run at most {most} workers on "
                f"{platforms.current().display_name}, not {self.parallelism}: the scheduler "
                "waits on each worker's channel and sentinel at once"
            )
        self.watch = Watch()
        self.workers: list[launcher.Child] = []
        #: What each busy worker runs: (request id, workload).
        self.busy: dict[int, tuple[int, Workload]] = {}
        #: When each worker last said anything (monotonic seconds).
        self.heard: dict[int, float] = {}
        #: Why a worker is being stopped (it stopped answering), by pid.
        self.hung: dict[int, str] = {}
        #: Workloads queued while no idle worker was ready: the next ready one takes them.
        self.waiting: collections.deque[Workload] = collections.deque()
        #: When each idle worker last finished a task or became ready (monotonic).
        self.idle_since: dict[int, float] = {}
        #: Workers asked to leave because they were idle too long, by pid.
        self.retiring: set[int] = set()
        #: Workers that ended without being asked to (died, or stopped for hanging).
        self.lost_workers = 0
        #: Whether a worker has booted yet: until then one is wanted even with no work.
        self.proved = False
        #: Workers in a row that could not boot, and when the next one may be launched.
        self.boot_failures = 0
        self._next_boot_at = 0.0
        self.stopping = False
        self._events: list[WorkerLost | TaskEnded] = []
        #: Requests whose try the scheduler took back (see :meth:`forget`): their worker
        #: stays busy until it answers, but nothing is reported of them.
        self.forgotten: set[int] = set()
        #: The XCom backend's routing, checked once at start (see spawnflow.xcoms.check).
        self.xcom_backend: BackendChoice | None = None
        #: The kinds of forkserver it shares with its workers while it runs.
        self._shared: set[str] = set()

    def start(self) -> None:
        from spawnflow import xcoms

        # In a helper child: the backend's modules never enter this process or, through
        # a fork, the workers. A backend that cannot load is a UserError here, at start.
        self.xcom_backend = xcoms.check(self.settings)
        # The workers fork their tasks and XCom helpers from one server of ours, not
        # from one interpreter each (unless this process was handed one itself).
        self._shared = forkservers.share(self.settings, ("task", "xcom-helper"))
        self._dispatch()
        self.watch.every(self.settings.executor.heartbeat_interval, self._tend_workers)
        self.watch.until(lambda: self.proved)

    def _launch(self) -> None:
        spec = launcher.ChildSpec(
            "executor-worker", TARGET, {"xcom_backend": self.xcom_backend},
            settings=self.settings,
            warm_stop_group=False,  # the worker stops its task itself, after a grace period
        )  # fmt: skip
        worker = launcher.launch(spec, share_forkservers=True)
        self.workers.append(worker)
        self.watch.add(
            worker, on_ready=self._on_ready, on_message=self._on_message,
            on_exit=self._on_exit, on_boot_failure=self._on_boot_failure,
        )  # fmt: skip

    def _idle(self) -> list[launcher.Child]:
        return [
            w for w in self.workers
            if w.ready is not None and w.pid not in self.busy and w.pid not in self.hung
            and w.pid not in self.retiring and w.exit_status is None
        ]  # fmt: skip

    def free_slots(self) -> int:
        """Workloads it can take now: ``parallelism`` less those it holds and the
        workers on their way out (hung or retiring), whose process still counts."""
        if self.stopping:
            return 0
        leaving = sum(
            1 for w in self.workers
            if w.pid not in self.busy and (w.pid in self.hung or w.pid in self.retiring)
        )  # fmt: skip
        return max(0, self.parallelism - len(self.busy) - len(self.waiting) - leaving)

    def running(self) -> int:
        """Workloads a worker runs now (not those still waiting for a worker to boot:
        a stop hands those back through :meth:`end` at once)."""
        return len(self.busy)

    def holds(self) -> set[int]:
        return set(self.sent_tries()) | {workload.ti_id for workload in self.waiting}

    def sent_tries(self) -> dict[int, int]:
        return {
            workload.ti_id: workload.try_number
            for request, workload in self.busy.values() if request not in self.forgotten
        }  # fmt: skip

    def forget(self, ti_id: int, try_number: int) -> None:
        def the_try(workload: Workload) -> bool:
            return (workload.ti_id, workload.try_number) == (ti_id, try_number)

        self.waiting = collections.deque(w for w in self.waiting if not the_try(w))
        self.forgotten |= {request for request, w in self.busy.values() if the_try(w)}

    def queue(self, workload: Workload) -> None:
        """Give ``workload`` to an idle worker, or keep it for the next one to be ready
        (starting one if none is on its way)."""
        self.waiting.append(workload)
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand waiting workloads to idle workers, and launch the workers still needed
        (one, before any has booted), unless a failed boot's pause is still running."""
        if self.stopping:
            return
        idle = self._idle()
        while self.waiting and idle:
            self._send(idle.pop(0), self.waiting.popleft())
        booting = sum(1 for w in self.workers if w.ready is None)
        needed = max(len(self.waiting), 0 if self.proved else 1) - booting
        room = self.parallelism - len(self.workers)
        if time.monotonic() >= self._next_boot_at:
            for _ in range(min(needed, room)):
                self._launch()

    def _send(self, worker: launcher.Child, workload: Workload) -> None:
        self.idle_since.pop(worker.pid, None)
        request = RunTask(id=worker.channel.next_id(), workload=workload)
        self.busy[worker.pid] = (request.id, workload)
        try:
            worker.channel.send(request)
        except OSError:
            # It died since free_slots(): the watch finds it gone and reports the
            # workload lost, and the scheduler schedules it again.
            log.warning("worker died before it got its task", worker_pid=worker.pid)

    def request_stop(self) -> None:
        self.stopping = True
        for worker in self.workers:
            # One already asked to leave (hung, or idle too long) is not asked again: a
            # second request means "now" to a worker, and this stop is a warm one.
            leaving = worker.pid in self.hung or worker.pid in self.retiring
            if worker.exit_status is None and not leaving:
                worker.request_warm_stop()

    def wait(self, timeout: float) -> None:
        """Service the workers until one reports a task's end or is lost, a slot frees
        or fills, a stop is requested, another thread wakes the watch (see
        :meth:`Watch.waker`), or ``timeout`` passes. A worker saying it is alive
        does not end the wait: busy workers say so several times per task, and each
        early return is a whole scheduler loop."""
        ends = time.monotonic() + timeout
        slots = self.free_slots()
        while True:
            self.watch.wait(max(0.0, ends - time.monotonic()))
            if (
                self._events
                or self.free_slots() != slots
                or lifecycle.stop_requested.is_set()
                or self.watch.woken
                or time.monotonic() >= ends
            ):
                return

    def events(self) -> list[WorkerLost | TaskEnded]:
        found, self._events = self._events, []
        return found

    def end(self, grace: float | None = None) -> list[Workload]:
        self.stopping = True  # nothing launches meanwhile
        # Every worker: the tasks they launched through our server (if we share one) go
        # with them in a cold stop.
        stop_many(self.workers, grace, whole_tree=True)
        forkservers.unshare(self._shared)
        self.workers = []
        cut_short = [w for request, w in self.busy.values() if request not in self.forgotten]
        cut_short += list(self.waiting)
        self.busy, self.forgotten = {}, set()
        self.waiting.clear()
        # A worker the stop itself ended before the scheduler took the news (a Windows
        # console's Ctrl-C reaches every process on it, the workers too, and a worker's
        # second one ends it at once): its task was cut short by the same stop.
        cut_short += [event.workload for event in self._events if isinstance(event, WorkerLost)]
        self._events = [event for event in self._events if not isinstance(event, WorkerLost)]
        return cut_short

    # -- what the watch reports -----------------------------------------------------

    def _on_ready(self, watched: Watched) -> None:
        self.boot_failures, self.proved = 0, True
        now = time.monotonic()
        self.heard[watched.child.pid] = now  # its silence counts from here
        self.idle_since[watched.child.pid] = now
        self._dispatch()

    def _on_boot_failure(self, watched: Watched, error: ChildBootError) -> None:
        """A worker that could not boot: launch another after a pause that doubles with
        each failure in a row (1 s, 2 s, …), unless they keep failing."""
        self.workers.remove(watched.child)
        if self.stopping:
            return  # stopped while it booted: nothing to replace
        self.boot_failures += 1
        delay = BOOT_RETRY_DELAY * 2 ** (self.boot_failures - 1)
        log.warning("worker could not boot", worker_pid=watched.child.pid, error=str(error),
                    failures_in_a_row=self.boot_failures, retry_seconds=delay)  # fmt: skip
        if self.boot_failures >= MAX_BOOT_FAILURES:
            raise error  # the settings or the machine are wrong: say so, do not loop
        self._next_boot_at = time.monotonic() + delay

    def _tend_workers(self) -> None:
        """Launch the workers that waiting work needs once a failed boot's pause is
        over, let idle ones go, and find workers that hang."""
        self._dispatch()
        self._retire_idle_workers()
        self._find_hung_workers()

    def _retire_idle_workers(self) -> None:
        """Stop workers idle for [executor] worker_idle_timeout (0: never); the next
        workload that finds no idle worker starts a fresh one."""
        limit = self.settings.executor.worker_idle_timeout
        if not limit or self.stopping:
            return
        now = time.monotonic()
        for worker in self._idle():
            idle = now - self.idle_since.get(worker.pid, now)
            if idle < limit:
                continue
            self.retiring.add(worker.pid)
            log.info(
                "worker idle; letting it go", worker_pid=worker.pid, idle_seconds=round(idle, 1)
            )
            self.watch.stop(self._watched(worker))

    def _on_message(self, watched: Watched, message: object) -> None:
        worker = watched.child
        self.heard[worker.pid] = time.monotonic()
        if isinstance(message, TaskFinished):
            sent = self.busy.get(worker.pid)
            if sent is None or sent[0] != message.id:
                log.warning("worker answered a request it was not running", worker_pid=worker.pid,
                            request_id=message.id)  # fmt: skip
                return
            del self.busy[worker.pid]
            self.idle_since[worker.pid] = time.monotonic()
            if sent[0] in self.forgotten:
                self.forgotten.discard(sent[0])
                self._dispatch()
                return
            self._events.append(TaskEnded(message.ti_id, message.state, workload=sent[1],
                                          seconds=message.seconds))  # fmt: skip
            self._dispatch()
        elif not isinstance(message, WorkerAlive):
            log.warning("worker sent an unexpected message", worker_pid=worker.pid,
                        message=type(message).__name__)  # fmt: skip

    def _on_exit(self, watched: Watched, status: ExitStatus) -> None:
        worker = watched.child
        self.workers.remove(worker)
        if not self.workers:
            # An idle tree holds no worker, nor the server of ours that forked them.
            forkservers.let_go("executor-worker")
        self.heard.pop(worker.pid, None)
        self.idle_since.pop(worker.pid, None)
        if worker.pid in self.retiring:
            self.retiring.discard(worker.pid)
            log.debug("idle worker left", worker_pid=worker.pid, status=status.describe())
        else:
            how = self.hung.pop(worker.pid, None) or status.describe(meaning=False)
            log.warning("worker ended", worker_pid=worker.pid, status=status.describe())
            self.lost_workers += 1
            busy = self.busy.pop(worker.pid, None)
            if busy is not None and busy[0] in self.forgotten:
                self.forgotten.discard(busy[0])
            elif busy is not None:
                self._events.append(
                    WorkerLost(busy[1], f"its executor worker (pid {worker.pid}) {how}")
                )
        self._dispatch()  # work that waits for a worker may start one in its place

    def _find_hung_workers(self) -> None:
        """Stop workers that said nothing for [scheduler] task_heartbeat_timeout (a
        stopped or deadlocked process): warm, then cold after the grace period."""
        limit = self.settings.scheduler.task_heartbeat_timeout
        now = time.monotonic()
        for worker in self.workers:
            heard = self.heard.get(worker.pid)
            silent = 0.0 if heard is None else now - heard
            if worker.pid in self.hung or heard is None or silent <= limit:
                continue
            self.hung[worker.pid] = f"stopped answering for {silent:.0f} s and was stopped"
            log.warning("worker stopped answering; stopping it", worker_pid=worker.pid,
                        silent_seconds=round(silent, 1))  # fmt: skip
            self.watch.stop(self._watched(worker))  # warm, then cold after the grace period

    def _watched(self, worker: launcher.Child) -> Watched:
        return next(w for w in self.watch.watched if w.child is worker)
