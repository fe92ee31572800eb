"""``spawnflow celery worker`` (role ``celery-worker``): a Celery worker whose tasks are
tries of spawnflow task instances, run by spawnflow's own executor workers.

Celery never forks a task here. Its pool is ``threads``: each thread takes one message
(prefetch 1) and hands the workload to a local executor inside this process, which one
thread drives; the executor's worker processes and their task supervisors are started
by spawnflow's launcher under ``[executor] mp_start_method``, exactly as the local
executor's are for the scheduler. The thread acknowledges the message once the try has
ended. A warm stop (SIGTERM, a first Ctrl-C) lets the running tries finish; a second
Ctrl-C (or SIGQUIT) stops at once: Celery's cold stop asks its pool to terminate each
running job, and our pool ends the executor without grace, which kills the tries' task
processes; their messages go back to the queue, unacknowledged.

This process holds an engine (law 3): the supervisors write each try's state and
heartbeats to the shared metadata database.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass

from spawnflow.bootstrap import logs
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.tasks import Workload
from spawnflow.executors import TaskEnded, WorkerLost, celery_app

log = logs.get_logger("spawnflow.celery_worker")

#: Times a message whose executor worker was lost is put back before it is dropped
#: (the scheduler then fails or retries the try once its heartbeat is stale).
LOST_REDELIVERIES = 3


@dataclass(frozen=True)
class Lost:
    """The executor worker that ran the workload was lost: why."""

    how: str


class WorkloadRunner:
    """A local executor shared by the Celery worker's threads: :meth:`run` hands it a
    workload and blocks until the try ended (its state) or its executor worker was lost
    (:class:`Lost`). Only the driving thread touches the executor.

    An at-least-once broker can hand this worker the same try twice while the first
    copy still runs. The second copy is not queued again: its thread waits on the same
    try, so both messages are acknowledged when it ends (a copy that lands on another
    worker is refused there by the try's conditional write)."""

    def __init__(self, settings: Settings, concurrency: int) -> None:
        from spawnflow.executors.local import LocalExecutor

        self.executor = LocalExecutor(settings, parallelism=concurrency)
        self._inbox: queue.SimpleQueue[tuple[Workload, Future]] = queue.SimpleQueue()
        self._waiting: dict[tuple[int, int], list[Future]] = {}
        self._stop = threading.Event()
        self._cold = threading.Event()
        self._started = threading.Event()
        self._failed: Exception | None = None
        self._thread = threading.Thread(target=self._drive, name="spawnflow-executor",
                                        daemon=True)  # fmt: skip
        # A workload handed over ends the driving thread's wait at once (not at the
        # next event or timeout: that was most of a try's latency on this path).
        self._waker = self.executor.watch.waker()

    def start(self) -> None:
        """Start the executor (one worker process, to prove the set-up boots)."""
        self._thread.start()
        self._started.wait()
        if self._failed is not None:
            raise self._failed

    def run(self, workload: Workload) -> str | Lost:
        if self._stop.is_set() and not self._thread.is_alive():
            return Lost("the Celery worker stopped before it began")
        future: Future = Future()
        self._inbox.put((workload, future))
        self._waker.wake()
        return future.result()

    def stop(self, grace: float | None = None) -> None:
        self._stop.set()
        self._waker.wake()
        self._thread.join(timeout=None if grace is None else grace + 30)

    def stop_cold(self) -> None:
        """End the executor without grace: every running try's task process is killed
        and its :meth:`run` returns :class:`Lost`. Safe from a signal handler: it only
        sets events for the driving thread."""
        self._cold.set()
        self._stop.set()

    @property
    def stopped_cold(self) -> bool:
        return self._cold.is_set()

    def _drive(self) -> None:
        try:
            self.executor.start()
        except Exception as error:  # noqa: BLE001 (a set-up that cannot boot a worker: said at start)
            self._failed = error
            self._started.set()
            return
        self._started.set()
        try:
            while not self._stop.is_set():
                while not self._inbox.empty():
                    workload, future = self._inbox.get()
                    key = (workload.ti_id, workload.try_number)
                    if key in self._waiting:
                        log.info("the same try delivered again; waiting on the copy that runs",
                                 dag_id=workload.dag_id, task_id=workload.task_id,
                                 try_number=workload.try_number)  # fmt: skip
                    else:
                        self.executor.queue(workload)
                    self._waiting.setdefault(key, []).append(future)
                self.executor.wait(0.2)
                for event in self.executor.events():
                    self._settle(event)
        finally:
            cold = self._cold.is_set()
            for workload in self.executor.end(grace=0 if cold else None):
                how = "stopped cold" if cold else "the Celery worker stopped before it ended"
                self._settle(WorkerLost(workload, how))
            # Handed over but never queued: nothing ran, the message goes back.
            while not self._inbox.empty():
                workload, future = self._inbox.get()
                future.set_result(Lost("the Celery worker stopped before it began"))

    def _settle(self, event: TaskEnded | WorkerLost) -> None:
        workload = event.workload
        if workload is None:  # the local executor always says what ended
            return
        outcome = event.state if isinstance(event, TaskEnded) else Lost(event.how)
        for future in self._waiting.pop((workload.ti_id, workload.try_number), []):
            future.set_result(outcome)


def run(settings: Settings, *, queues: list[str], concurrency: int, hostname: str | None,
        loglevel: str = "INFO") -> int:  # fmt: skip
    """Run a Celery worker until it is stopped; its exit status (non-zero when Celery
    gave up, e.g. on an unrecoverable broker error)."""
    from celery import signals
    from celery.concurrency.thread import TaskPool

    app = celery_app.make_app(settings)
    runner = WorkloadRunner(settings, concurrency)

    class SpawnflowThreadPool(TaskPool):
        """Celery's threads pool, whose jobs can be terminated. A cold stop cancels each
        running request through ``terminate_job``, which the threads pool refuses (a
        thread cannot be killed), and then waits for the pool's threads, which wait on
        the executor: here both end the executor without grace."""

        def terminate_job(self, pid: int, signal: object = None) -> None:
            runner.stop_cold()

        def on_terminate(self) -> None:
            runner.stop_cold()
            super().on_terminate()

    app.conf.worker_pool = SpawnflowThreadPool

    @app.task(name=celery_app.TASK_NAME, bind=True)
    def run_workload(task, text: str) -> str:
        workload = celery_app.decode(text)
        log.info("running task", dag_id=workload.dag_id, task_id=workload.task_id,
                 run_id=workload.run_id, try_number=workload.try_number)  # fmt: skip
        outcome = runner.run(workload)
        if isinstance(outcome, Lost):
            log.warning("task's executor worker lost; giving the message back",
                        dag_id=workload.dag_id, task_id=workload.task_id,
                        how=outcome.how)  # fmt: skip
            if runner.stopped_cold:  # Celery's cold stop gave the message back already
                return "stopped"
            raise task.retry(countdown=1, max_retries=LOST_REDELIVERIES)
        log.info("task finished", dag_id=workload.dag_id, task_id=workload.task_id,
                 run_id=workload.run_id, try_number=workload.try_number, state=outcome)  # fmt: skip
        return outcome

    def stop_runner(**_: object) -> None:
        runner.stop(settings.core.stop_grace_period)

    signals.worker_shutdown.connect(stop_runner, weak=False)
    runner.start()
    argv = ["worker", f"--concurrency={concurrency}",
            f"--queues={','.join(queues)}", f"--loglevel={loglevel}", "--without-mingle",
            "--without-gossip"]  # fmt: skip
    if hostname:
        argv.append(f"--hostname={hostname}")
    # Not app.worker_main(), which drops the status Celery's worker command ends with.
    status = app.start(argv=argv)
    return status or 0
