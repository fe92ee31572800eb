"""The Celery executor: workloads go to a broker's queues; ``spawnflow celery worker``
processes, on any machine, run them through spawnflow's own supervisor.

The scheduler learns how each try ended from the metadata database, where the worker's
supervisor wrote it, not from Celery's results: so no result backend is needed, and
what a scheduler sent before it restarted is settled the same way (its task instances
are adopted or queued again, and a message that arrives twice starts nothing twice).
A worker that vanished mid-try stops heartbeating its task instance, which the
scheduler fails or retries after ``[scheduler] task_heartbeat_timeout``.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from spawnflow.bootstrap import lifecycle, logs
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.states import TaskState
from spawnflow.comms.tasks import Workload
from spawnflow.executors import BaseExecutor, TaskEnded, WorkerLost, celery_app

if TYPE_CHECKING:
    from celery import Celery

log = logs.get_logger("spawnflow.executor")

#: Seconds between two looks at the database for tries that ended.
POLL_INTERVAL = 0.05


class BrokerUnreachable(UserError):
    """The Celery broker does not answer."""


class CeleryExecutor(BaseExecutor):
    """Sends workloads to ``[celery] broker_url``; at most ``[executor] parallelism``
    in flight."""

    def __init__(self, settings: Settings, *, parallelism: int | None = None):
        self.settings = settings
        self.parallelism = parallelism or settings.executor.parallelism
        self.app: Celery | None = None
        #: What it sent and has not seen end, by task instance id.
        self.sent: dict[int, Workload] = {}
        #: What a scheduler that is gone sent and this one took over: the try number
        #: each message carries, by task instance id.
        self.adopted: dict[int, int] = {}
        self.stopping = False
        self._events: list[WorkerLost | TaskEnded] = []
        self._looked = 0.0

    def start(self) -> None:
        from kombu.exceptions import OperationalError

        self.app = celery_app.make_app(self.settings)
        timeout = self.settings.celery.operation_timeout
        try:
            with self.app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=timeout)
        except (OSError, OperationalError) as error:
            raise BrokerUnreachable(
                f"the Celery broker at {_hidden(self.settings.celery.broker_url)} does not "
                f"answer ({type(error).__name__}: {error}); check [celery] broker_url"
            ) from None

    def free_slots(self) -> int:
        return 0 if self.stopping else max(0, self.parallelism - self.running())

    def queue(self, workload: Workload) -> None:
        assert self.app is not None  # start() made it
        queue = celery_app.queue_of(workload, self.settings)
        self.app.send_task(
            celery_app.TASK_NAME, args=[celery_app.encode(workload)], queue=queue,
            task_id=f"{workload.dag_id}.{workload.task_id}.{workload.ti_id}."
            f"{workload.try_number}.{uuid.uuid4().hex[:8]}",
        )  # fmt: skip
        self.sent[workload.ti_id] = workload

    def adopt(self, queued: dict[int, int]) -> set[int]:
        """Their messages wait in the broker or run on a worker, which writes how each
        try ends to the database: this executor watches for that as for its own."""
        self.adopted.update(queued)
        return set(queued)

    def running(self) -> int:
        return len(self.sent) + len(self.adopted)

    def holds(self) -> set[int]:
        return set(self.sent) | set(self.adopted)

    def sent_tries(self) -> dict[int, int]:
        """Everything it holds left for the broker at :meth:`queue` (or was adopted)."""
        return {ti_id: w.try_number for ti_id, w in self.sent.items()} | self.adopted

    def forget(self, ti_id: int, try_number: int) -> None:
        """The message itself is not revoked (Celery's revoke reaches only the workers
        that listen now): if it turns up, the try's conditional write decides."""
        if ti_id in self.sent and self.sent[ti_id].try_number == try_number:
            del self.sent[ti_id]
        if self.adopted.get(ti_id) == try_number:
            del self.adopted[ti_id]

    def request_stop(self) -> None:
        self.stopping = True

    def events(self) -> list[WorkerLost | TaskEnded]:
        self._look()
        found, self._events = self._events, []
        return found

    def wait(self, timeout: float) -> None:
        """Look at the database every :data:`POLL_INTERVAL` until a try ended, a stop is
        requested or ``timeout`` passes."""
        ends = time.monotonic() + timeout
        while True:
            self._look()
            left = ends - time.monotonic()
            if self._events or lifecycle.stop_requested.is_set() or left <= 0:
                return
            time.sleep(min(POLL_INTERVAL, left))  # the database has nothing to wait on

    def end(self, grace: float | None = None) -> list[Workload]:
        """Nothing to stop here: the workers run what they took to its end, and what
        waits in the broker stays there for them."""
        self.stopping = True
        self.sent.clear()
        self.adopted.clear()
        if self.app is not None:
            self.app.close()
        return []

    def _look(self) -> None:
        """Turn the tries that ended (or are no longer this message's) into events."""
        if not (self.sent or self.adopted) or time.monotonic() - self._looked < POLL_INTERVAL / 2:
            return
        from sqlalchemy import select

        from spawnflow.bootstrap import orm
        from spawnflow.models.views import task_instance as ti

        self._looked = time.monotonic()
        watched = [*self.sent, *self.adopted]
        query = select(ti.c.id, ti.c.state, ti.c.try_number).where(ti.c.id.in_(watched))
        with orm.engine().connect() as connection:
            rows = {row.id: row for row in connection.execute(query)}
        for ti_id, workload in list(self.sent.items()):
            row = rows.get(ti_id)
            if row is not None and _under_way(row.state, row.try_number, workload.try_number):
                continue
            del self.sent[ti_id]
            state = row.state if row is not None else TaskState.REMOVED
            self._events.append(TaskEnded(ti_id, state, workload=workload))
        for ti_id, try_number in list(self.adopted.items()):
            row = rows.get(ti_id)
            if row is not None and _under_way(row.state, row.try_number, try_number):
                continue
            del self.adopted[ti_id]
            state = row.state if row is not None else TaskState.REMOVED
            self._events.append(TaskEnded(ti_id, state))


def _under_way(state: str, try_number: int, sent: int) -> bool:
    """Whether the row still waits for, or runs, the try numbered ``sent``: queued, its
    number is the one before (a try's number counts up when it starts; a resumed
    deferral keeps its own), else running (or restarting) under that number."""
    if state == TaskState.QUEUED:
        return try_number in (sent - 1, sent)
    return state in (TaskState.RUNNING, TaskState.RESTARTING) and try_number == sent


def _hidden(url: str) -> str:
    from spawnflow.bootstrap.settings_table import hide_password

    return hide_password(url)
