"""The local executor: ``[executor] parallelism`` long-lived worker processes.

Workers are launched by the launcher with the executor's start method and each
supervises one task at a time. A worker that dies is replaced; the task it ran is
reported lost, and the scheduler fails it (or retries it) with the reason.
"""

from __future__ import annotations

from spawnflow.bootstrap import launcher, logs
from spawnflow.bootstrap.child import stop_many
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.tasks import RunTask, TaskFinished, Workload
from spawnflow.executors import BaseExecutor, TaskEnded, WorkerLost

TARGET = "spawnflow.processors.worker.worker:run"

log = logs.get_logger("spawnflow.executor")


class LocalExecutor(BaseExecutor):
    """Runs workloads in worker processes; constructing one starts nothing."""

    def __init__(self, settings: Settings, *, method: str | None = None,
                 parallelism: int | None = None):  # fmt: skip
        self.settings = settings
        self.method = method
        self.parallelism = parallelism or settings.executor.parallelism
        self.workers: list[launcher.Child] = []
        #: What each busy worker runs: (request id, workload).
        self.busy: dict[int, tuple[int, Workload]] = {}
        self.replaced = 0
        self.stopping = False
        #: The XCom backend's routing, checked once at start (see spawnflow.xcoms.check).
        self.xcom_backend = None

    def start(self) -> None:
        from spawnflow import xcoms

        # In a helper child: the backend's modules never enter this process or, through
        # a fork, the workers. A backend that cannot load is a UserError here, at start.
        self.xcom_backend = xcoms.check(self.settings, method=self.method)
        self.workers = [self._launch() for _ in range(self.parallelism)]
        for worker in self.workers:
            worker.wait_ready(timeout=120)

    def _launch(self) -> launcher.Child:
        spec = launcher.ChildSpec(
            "executor-worker", TARGET,
            {"method": self.method, "xcom_backend": self.xcom_backend}, settings=self.settings,
            warm_stop_group=False,  # the worker stops its task itself, after a grace period
        )  # fmt: skip
        return launcher.launch(spec, method=self.method, component="executor")

    def _idle(self) -> list[launcher.Child]:
        return [w for w in self.workers if w.pid not in self.busy and w.is_alive()]

    def free_slots(self) -> int:
        return 0 if self.stopping else len(self._idle())

    def running(self) -> int:
        return len(self.busy)

    def queue(self, workload: Workload) -> None:
        worker = self._idle()[0]
        request = RunTask(id=worker.channel.next_id(), workload=workload)
        self.busy[worker.pid] = (request.id, workload)
        try:
            worker.channel.send(request)
        except OSError:
            # It died since free_slots(): events() finds it gone and reports the
            # workload lost, and the scheduler schedules it again.
            log.warning("worker died before it got its task", pid=worker.pid)

    def request_stop(self) -> None:
        self.stopping = True
        for worker in self.workers:
            if worker.is_alive():
                worker.request_warm_stop()

    def events(self) -> list[WorkerLost | TaskEnded]:
        found: list[WorkerLost | TaskEnded] = []
        for worker in list(self.workers):
            while worker.exit_status is None and worker.channel.poll():
                try:
                    message = worker.channel.recv()
                except (EOFError, OSError):
                    break
                if isinstance(message, TaskFinished):
                    self.busy.pop(worker.pid, None)
                    found.append(TaskEnded(message.ti_id, message.state))
            if not worker.is_alive():
                status = worker.join(timeout=30)
                busy = self.busy.pop(worker.pid, None)
                how = f"its executor worker (pid {worker.pid}) {status.describe(meaning=False)}"
                log.warning("worker died", pid=worker.pid, status=status.describe())
                if busy is not None:
                    found.append(WorkerLost(busy[1], how))
                self.workers.remove(worker)
                if self.stopping:
                    continue
                replacement = self._launch()
                replacement.wait_ready(timeout=120)
                self.workers.append(replacement)
                self.replaced += 1
        return found

    def wait_objects(self) -> list:
        objects = []
        for worker in self.workers:
            objects += [worker.channel.connection, worker.sentinel]
        return objects

    def end(self, grace: float | None = None) -> None:
        stop_many(self.workers, grace)
        self.workers = []
