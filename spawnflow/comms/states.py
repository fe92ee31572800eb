"""The shared vocabulary: states of task instances and Dag runs, kinds of errors.

Below everything that uses them (no SQLAlchemy here): the models store these values,
the scheduler decides on them, the wire carries them, commands print them. They are
``StrEnum``s, so a value read back from the database or the wire compares equal.
"""

from __future__ import annotations

from enum import StrEnum, nonmember


class DagRunState(StrEnum):
    """Where a Dag run is (Airflow's names)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"

    FINISHED = nonmember((SUCCESS, FAILED))
    ACTIVE = nonmember((QUEUED, RUNNING))


class TaskState(StrEnum):
    """Where a task instance is (Airflow's names, and two of spawnflow's)."""

    NONE = "none"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    UPSTREAM_FAILED = "upstream_failed"
    SKIPPED = "skipped"
    #: Cleared while it ran: its supervisor stops the task process, then sets ``none``.
    RESTARTING = "restarting"
    #: Its task is no longer in the Dag (the file changed while the run was going).
    REMOVED = "removed"
    #: Waiting for a trigger on a triggerer, holding no worker slot; resumes when it fires.
    DEFERRED = "deferred"

    FINISHED = nonmember((SUCCESS, FAILED, UPSTREAM_FAILED, SKIPPED, REMOVED))
    #: States in which a task process may exist.
    ACTIVE = nonmember((QUEUED, RUNNING, RESTARTING))


class ErrorKind(StrEnum):
    """What went wrong, in an ``ErrorResponse``: stable codes a caller may branch on."""

    #: The XCom backend raised, refused a value, or its helper process died.
    XCOM_BACKEND_ERROR = "XCOM_BACKEND_ERROR"
    #: A call to the XCom backend took longer than [xcom] helper_call_timeout.
    XCOM_BACKEND_TIMEOUT = "XCOM_BACKEND_TIMEOUT"
    XCOM_KEY_INVALID = "XCOM_KEY_INVALID"
    #: An XCom pulled that nobody pushed, where that is an error (``tasks test --strict``).
    XCOM_NOT_FOUND = "XCOM_NOT_FOUND"
    XCOM_TOO_LARGE = "XCOM_TOO_LARGE"
    #: The task instance is no longer in this try (cleared, failed from outside).
    TASK_NOT_RUNNING = "TASK_NOT_RUNNING"
    DATABASE_ERROR = "DATABASE_ERROR"
    #: A Variable or Connection lookup failed.
    LOOKUP_FAILED = "LOOKUP_FAILED"
    #: A state store value larger than [core] max_xcom_size.
    STATE_TOO_LARGE = "STATE_TOO_LARGE"
    #: A state store request could not be answered (its backend failed, say).
    STATE_STORE_ERROR = "STATE_STORE_ERROR"
    UNKNOWN_REQUEST = "UNKNOWN_REQUEST"
    SUPERVISOR_ERROR = "SUPERVISOR_ERROR"


class RunType(StrEnum):
    """Why a Dag run exists."""

    SCHEDULED = "scheduled"
    MANUAL = "manual"
    #: Created when the assets it is scheduled on were updated.
    ASSET_TRIGGERED = "asset_triggered"
    #: Created by ``spawnflow dags backfill`` for a past logical date.
    BACKFILL = "backfill"


class ReprocessBehavior(StrEnum):
    """Which logical dates a backfill runs again when they already have a run (Airflow's
    names). A date whose run is queued or running is never run twice."""

    #: Only dates that have no run at all.
    NONE = "none"
    #: Those too whose run failed.
    FAILED = "failed"
    #: Every date: runs that succeeded run again too.
    COMPLETED = "completed"


class JobState(StrEnum):
    """Where a scheduler or triggerer job is (its row in the ``job`` table)."""

    RUNNING = "running"
    STOPPED = "stopped"
    #: Its heartbeat went stale: another scheduler took over what it left.
    FAILED = "failed"
