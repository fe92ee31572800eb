"""Messages about running tasks: scheduler to worker, task process to its supervisor."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from spawnflow.bootstrap.wire import Message, Request, Response
from spawnflow.comms import retries


class Workload(msgspec.Struct, frozen=True):
    """Everything a worker needs to run one try of one task: ids and references only.

    Self-contained, so that an executor on another machine could run it.
    """

    ti_id: int
    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    dag_file: str
    dags_folder: str | None
    logical_date: dt.datetime
    data_interval_start: dt.datetime | None
    data_interval_end: dt.datetime | None
    conf: dict[str, Any]
    params: dict[str, Any]
    execution_timeout: float | None
    retry_delay: float
    log_file: str
    #: URIs of the assets the task updates when it succeeds.
    outlets: list[str] = msgspec.field(default_factory=list)
    #: The run's partition, for a partition-driven run.
    partition_key: str | None = None
    #: The asset events that triggered the run, by asset URI (an asset-triggered run).
    triggering_asset_events: dict[str, list[dict[str, Any]]] = msgspec.field(default_factory=dict)
    #: A deferred try resuming: the function or method to call, and its keyword
    #: arguments as JSON text (``event`` among them: what the trigger yielded).
    next_method: str | None = None
    next_kwargs: str | None = None
    #: The Celery executor's queue for it (None: [celery] default_queue).
    queue: str | None = None
    #: The default start method of the task's own ``multiprocessing`` (``dags check``
    #: sets the method under test); None leaves Python's default.
    multiprocessing_start_method: str | None = None
    #: The task's ``retry_exponential_backoff`` and ``max_retry_delay`` (seconds).
    retry_exponential_backoff: bool = False
    max_retry_delay: float | None = None
    #: The task instance's ``max_tries`` when it was queued: a failed try is retried if
    #: ``try_number <= max_tries`` (the task process picks ``on_retry_callback`` or
    #: ``on_failure_callback`` by it). None: unknown, a failure is taken as the last.
    max_tries: int | None = None
    #: The task's callbacks, by name (``on_failure_callback``...): the supervisor calls
    #: the failure ones in a new task process when it had to stop the task on its
    #: ``execution_timeout`` (the task process could not call them itself).
    callbacks: list[str] = msgspec.field(default_factory=list)
    #: Which element of a mapped task this try runs (0..n-1); -1 for an unmapped task.
    map_index: int = -1

    def retry_wait(self) -> float:
        """Seconds this try waits before the next one if it fails (see
        :func:`spawnflow.comms.retries.retry_wait`)."""
        return retries.retry_wait(
            self.retry_delay, self.try_number,
            exponential_backoff=self.retry_exponential_backoff,
            max_retry_delay=self.max_retry_delay,
            key=retries.try_key(self.dag_id, self.task_id, self.ti_id, self.try_number),
        )  # fmt: skip

    def retried_if_failed(self) -> bool:
        """Whether a failure of this try is followed by another try."""
        return self.max_tries is not None and self.try_number <= self.max_tries


# -- scheduler (executor) and worker ---------------------------------------------------


class RunTask(Request, frozen=True):
    """Run this try of a task; answered with TaskFinished once it has ended."""

    workload: Workload


class TaskFinished(Response, frozen=True):
    ti_id: int
    state: str
    #: Seconds from the worker taking the task to the end being recorded.
    seconds: float | None = None


class WorkerAlive(Message, frozen=True):
    """Sent by an executor worker every heartbeat interval, idle or busy: its loop turns."""


# -- task process and its supervisor -------------------------------------------------


class XComPull(Request, frozen=True):
    """The value another task of this run pushed under ``key``."""

    task_id: str
    key: str


class XComValue(Response, frozen=True):
    #: The JSON text of the value (see ``spawnflow.sdk.xcom``); None if nothing was pushed.
    value: str | None


class XComPush(Request, frozen=True):
    key: str
    value: str


class Done(Response, frozen=True):
    """A request that has nothing to answer succeeded."""


class GetVariable(Request, frozen=True):
    key: str


class VariableValue(Response, frozen=True):
    value: str | None


class ConnectionData(msgspec.Struct, frozen=True):
    """A Connection's fields, as they cross the wire (``spawnflow.sdk.Connection`` adds
    the task-side ``get``)."""

    conn_id: str
    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = None
    schema: str | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    def __repr__(self) -> str:  # the password stays out of logs and tracebacks
        shown = "***" if self.password else None
        return (f"Connection(conn_id={self.conn_id!r}, conn_type={self.conn_type!r}, "
                f"host={self.host!r}, port={self.port!r}, login={self.login!r}, "
                f"password={shown!r}, schema={self.schema!r})")  # fmt: skip


class GetConnection(Request, frozen=True):
    conn_id: str


class ConnectionValue(Response, frozen=True):
    #: None if there is no such Connection.
    connection: ConnectionData | None


class Deferral(msgspec.Struct, frozen=True):
    """A task's hand-over to a trigger (``raise TaskDeferred(...)``)."""

    classpath: str
    #: The trigger's keyword arguments, as JSON text.
    trigger_kwargs: str
    method_name: str
    #: Keyword arguments for ``method_name``, as JSON text.
    next_kwargs: str
    #: Seconds the trigger may take before the try fails; None: no limit.
    timeout: float | None = None


class TaskStarting(Message, frozen=True):
    """Sent once the task process imported the Dag file and found the task. What comes
    before ``execute`` (its mapped element, templates, pulled arguments,
    ``on_execute_callback``) runs next, on the longer of ``execution_timeout`` and
    ``[core] callback_timeout``. This message and the two after it set the deadlines
    of a task with an ``execution_timeout``, and only such a task sends them."""


class ExecuteStarting(Message, frozen=True):
    """Sent just before the task's ``execute`` (its function, command or method) is
    called: ``execution_timeout`` counts from here, as Airflow's wraps ``execute``."""


class ExecuteEnded(Message, frozen=True):
    """Sent when ``execute`` returned: the push of its return value and the choice of a
    branch come after, on the longer of the two budgets again."""


class Follow(msgspec.Struct, frozen=True):
    """What a branch or short-circuit task chose, as it returned it: the supervisor (which
    has the database) checks the ids and decides which task instances are skipped."""

    #: The task or task group ids to follow; empty: none of the downstream tasks.
    task_ids: list[str]
    #: Skip every task downstream, not only the direct ones (a short-circuit that
    #: ignores the downstream trigger rules).
    whole_downstream: bool = False


class TaskOutcome(Message, frozen=True):
    """Sent by the task process as its last word."""

    state: str  # "success", "failed" or "deferred"
    reason: str | None = None
    deferral: Deferral | None = None
    #: A branch or short-circuit task that succeeded: what it chose to follow.
    follow: Follow | None = None
