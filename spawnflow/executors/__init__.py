"""Executors: what runs task supervisors for the scheduler.

The scheduler hands an executor self-contained workloads (ids and references, never
live objects) and asks it for events; how and where supervisors run is the
executor's business. The local executor runs them in worker processes on this
machine; a distributed one could put the same workloads on a queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


class BaseExecutor:
    """The scheduler's view of an executor."""

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

    def request_stop(self) -> None:
        """Warm stop: take nothing new, let what runs finish (without waiting for it)."""

    def events(self) -> list[WorkerLost | TaskEnded]:
        """What happened since the last call (never blocks)."""
        raise NotImplementedError

    def wait_objects(self) -> list[Any]:
        """Objects for ``multiprocess.connection.wait`` that become ready on an event."""
        return []

    def end(self, grace: float | None = None) -> None:
        raise NotImplementedError
