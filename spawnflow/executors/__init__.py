"""Executors: what runs task supervisors for the scheduler.

The scheduler hands an executor self-contained workloads (ids and references, never
live objects) and asks it for events; how and where supervisors run is the
executor's business. The local executor runs them in worker processes on this
machine; a distributed one could put the same workloads on a queue.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.tasks import Workload


@dataclass
class WorkerLost:
    """A worker died while it ran ``workload``."""

    workload: Workload
    how: str


@dataclass
class TaskEnded:
    """A worker finished ``ti_id`` in ``state``."""

    ti_id: int
    state: str
    #: What it ran, and for how long (the worker's count), for the scheduler's log.
    workload: Workload | None = field(default=None, compare=False)
    seconds: float | None = field(default=None, compare=False)


class BaseExecutor:
    """The scheduler's view of an executor; made with the settings snapshot."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def start(self) -> None:
        raise NotImplementedError

    def free_slots(self) -> int:
        """How many more workloads it can take now."""
        raise NotImplementedError

    def queue(self, workload: Workload) -> None:
        raise NotImplementedError

    def running(self) -> int:
        """How many workloads it runs now."""
        raise NotImplementedError

    def holds(self) -> set[int]:
        """The task instance ids of the workloads it was given and has not yet reported
        ended or lost."""
        raise NotImplementedError

    def sent_tries(self) -> dict[int, int]:
        """The workloads that left this executor for a worker (a worker process, a
        broker's queue): their task instance ids, each with its workload's try number.
        What it holds but has not sent yet (waiting for a worker of its own to boot) is
        not among them. The scheduler fails or queues again a task instance that stays
        queued too long only if its workload left (or the executor does not hold it)."""
        return {}

    def forget(self, ti_id: int, try_number: int) -> None:
        """Stop holding the workload of ``ti_id``'s try ``try_number`` (the scheduler
        queues that task instance again, or fails it): it is never reported ended or
        lost, and one not sent yet is never sent. A copy that still reaches a worker
        starts nothing unless its task instance is queued for that try again (the
        try's conditional write decides, so the try runs once)."""

    def adopt(self, queued: dict[int, int]) -> set[int]:
        """Take over task instances that a scheduler which is gone queued: their ids,
        each with the try number its workload carries. Returns the ids taken over (this
        executor reports their ends as its own); the scheduler queues the rest again.
        Called before :meth:`start`. An executor whose workers left with their
        scheduler, as the local one's do, takes over none."""
        return set()

    def request_stop(self) -> None:
        """Warm stop: take nothing new, let what runs finish (without waiting for it)."""

    def events(self) -> list[WorkerLost | TaskEnded]:
        """What happened since the last call (never blocks)."""
        raise NotImplementedError

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for something to happen (then see :meth:`events`)."""
        import time

        time.sleep(timeout)

    def end(self, grace: float | None = None) -> list[Workload]:
        """Stop: warm, then cold after ``grace`` seconds. Returns the workloads that
        were still running (their supervisors are gone; what they wrote stands)."""
        raise NotImplementedError


def load(settings: Settings) -> BaseExecutor:
    """The executor ``[core] executor`` names (constructing one starts nothing)."""
    name = settings.core.executor
    if name == "local":
        from spawnflow.executors.local import LocalExecutor

        return LocalExecutor(settings)
    if name == "celery":
        from spawnflow.executors.celery_executor import CeleryExecutor

        return CeleryExecutor(settings)
    module_name, _, class_name = name.replace(":", ".").rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise UserError(f"[core] executor {name!r} cannot be loaded: {error}") from None
    if not (isinstance(found, type) and issubclass(found, BaseExecutor)):
        raise UserError(f"[core] executor {name!r} is not a subclass of BaseExecutor")
    return found(settings)
