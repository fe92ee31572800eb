"""What ``spawnflow status`` shows: a snapshot of the metadata database, as plain data.

The snapshot is read by a process that holds an engine (the ``status`` command itself,
or the scheduler for ``standalone``'s live view, whose own process keeps SQLAlchemy out)
and crosses the process boundary as a message like any other.
"""

from __future__ import annotations

import datetime as dt

import msgspec


class RunColumn(msgspec.Struct, frozen=True):
    """One Dag run of the grid: a column of task states."""

    run_id: str
    state: str
    logical_date: dt.datetime | None
    #: Task id → its state in this run (a task the run has no instance of is absent).
    task_states: dict[str, str]


class DagGrid(msgspec.Struct, frozen=True):
    """A Dag and its newest runs, oldest first, as Airflow's grid view lays them out."""

    dag_id: str
    schedule: str
    paused: bool
    #: The tasks of these runs, in the order their instances were created (upstream first).
    task_ids: list[str]
    runs: list[RunColumn]


class RunningTask(msgspec.Struct, frozen=True):
    """A task instance that is queued, running, deferred or waiting for a retry."""

    dag_id: str
    run_id: str
    task_id: str
    state: str
    try_number: int
    #: When its current try started (None while it waits to be started).
    start_date: dt.datetime | None


class ImportErrorLine(msgspec.Struct, frozen=True):
    """A Dag file that does not load, and the last line of why."""

    fileloc: str
    error: str


class ComponentHealth(msgspec.Struct, frozen=True):
    """A long-running component and how recently it showed signs of life."""

    component: str
    hostname: str
    pid: int | None
    #: When it last heartbeat (a scheduler or triggerer) or last parsed a file (the Dag
    #: processor).
    last_seen: dt.datetime | None
    #: Seconds after which a component that has not been seen counts as gone.
    timeout: float


class StatusSnapshot(msgspec.Struct, frozen=True):
    """Everything the status view shows, as of ``taken_at``."""

    taken_at: dt.datetime
    dags: list[DagGrid]
    running: list[RunningTask]
    import_errors: list[ImportErrorLine]
    components: list[ComponentHealth]
