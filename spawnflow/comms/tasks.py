"""Messages about running tasks: scheduler to worker, task process to its supervisor."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from spawnflow.bootstrap.wire import Message, Request, Response
from spawnflow.sdk.connections import Connection


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


# -- scheduler (executor) and worker ---------------------------------------------------


class RunTask(Request):
    """Run this try of a task; answered with TaskFinished once it has ended."""

    workload: Workload


class TaskFinished(Response):
    ti_id: int
    state: str


# -- task process and its supervisor -------------------------------------------------


class XComPull(Request):
    """The value another task of this run pushed under ``key``."""

    task_id: str
    key: str


class XComValue(Response):
    #: The JSON text of the value (see ``spawnflow.sdk.xcom``); None if nothing was pushed.
    value: str | None


class XComPush(Request):
    key: str
    value: str


class Done(Response):
    """A request that has nothing to answer succeeded."""


class GetVariable(Request):
    key: str


class VariableValue(Response):
    value: str | None


class GetConnection(Request):
    conn_id: str


class ConnectionValue(Response):
    #: None if there is no such Connection.
    connection: Connection | None


class TaskOutcome(Message):
    """Sent by the task process as its last word."""

    state: str  # "success" or "failed"
    reason: str | None = None
