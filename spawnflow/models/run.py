"""Dag runs, task instances and XComs: what the scheduler and the workers share.

States are Airflow's (:mod:`spawnflow.comms.states`, re-exported here). A task
instance is keyed by a surrogate id and is unique per (run, task); the id is what
crosses process boundaries in a workload.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    literal_column,
)
from sqlalchemy.orm import Mapped, mapped_column

from spawnflow.comms.states import DagRunState, TaskState
from spawnflow.models.base import Base, Identifier
from spawnflow.models.dag import LongText
from spawnflow.models.job import utcnow

__all__ = ["Connection", "DagRun", "DagRunState", "TaskInstance", "TaskState", "Variable", "XCom"]


class DagRun(Base):
    """One run of a Dag, for one logical date (scheduled) or one trigger (manual)."""

    __tablename__ = "dag_run"
    __table_args__ = (UniqueConstraint("dag_id", "run_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(Identifier, ForeignKey("dag.dag_id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(Identifier)
    run_type: Mapped[str] = mapped_column(String(20))
    state: Mapped[str] = mapped_column(String(20), index=True)
    logical_date: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    data_interval_start: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    data_interval_end: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    conf: Mapped[str] = mapped_column(Text, default="{}")
    #: The partition a partition-driven run is for (see :mod:`spawnflow.models.assets`).
    partition_key: Mapped[str | None] = mapped_column(String(250))
    #: The backfill that made (or ran again) this run (see :mod:`spawnflow.models.backfill`).
    backfill_id: Mapped[int | None] = mapped_column(
        Integer, ForeignKey("backfill.id", ondelete="SET NULL"), index=True
    )
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    start_date: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    end_date: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))


class TaskInstance(Base):
    """One task of one Dag run, across its tries."""

    __tablename__ = "task_instance"
    __table_args__ = (UniqueConstraint("dag_run_id", "task_id", "map_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_run_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("dag_run.id", ondelete="CASCADE"), index=True
    )
    dag_id: Mapped[str] = mapped_column(Identifier, index=True)
    task_id: Mapped[str] = mapped_column(Identifier)
    #: Which element of a mapped task this instance runs (0..n-1); -1 for an unmapped
    #: task, and for a mapped task's placeholder until it is expanded (as Airflow's).
    map_index: Mapped[int] = mapped_column(Integer, default=-1, server_default="-1")
    state: Mapped[str] = mapped_column(String(20), index=True, default=TaskState.NONE)
    try_number: Mapped[int] = mapped_column(Integer, default=0)
    max_tries: Mapped[int] = mapped_column(Integer, default=0)
    queued_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    start_date: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    end_date: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    duration: Mapped[float | None] = mapped_column(Float)
    #: When an up_for_retry task may be scheduled again.
    next_try_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    hostname: Mapped[str | None] = mapped_column(String(255))
    #: The supervising worker's process id and its job row.
    worker_pid: Mapped[int | None] = mapped_column(Integer)
    scheduler_job_id: Mapped[int | None] = mapped_column(Integer)
    task_pid: Mapped[int | None] = mapped_column(Integer)
    last_heartbeat: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    #: Why the task ended the way it did (a timeout, a signal, a traceback's last line).
    reason: Mapped[str | None] = mapped_column(Text)
    #: While deferred: the trigger it waits for, and when the wait times out.
    trigger_id: Mapped[int | None] = mapped_column(Integer, index=True)
    trigger_timeout: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    #: Where a deferred try resumes (a function or method name), and its keyword
    #: arguments as JSON text (the trigger's event among them, once it fired).
    next_method: Mapped[str | None] = mapped_column(String(250))
    next_kwargs: Mapped[str | None] = mapped_column(LongText)
    #: The pool the task takes slots from, how many, and its effective priority weight
    #: (see :mod:`spawnflow.models.pool`); the scheduler queues heavier ones first.
    pool: Mapped[str] = mapped_column(Identifier, index=True, server_default="default_pool")
    pool_slots: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    priority_weight: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    #: How many times the row was updated: every UPDATE through SQLAlchemy, ORM flush
    #: or statement, raises it (``onupdate``), whoever writes it. The scheduler sums it
    #: per run to skip runs in which nothing changed since its last pass.
    row_version: Mapped[int] = mapped_column(
        Integer, default=0, server_default="0", onupdate=literal_column("row_version + 1")
    )


class XCom(Base):
    """A value a task pushed, for its downstream tasks.

    Either ``value`` holds its JSON text, or ``reference`` says where the configured
    XCom backend keeps it (an object's URL, say) and ``value`` is empty.
    """

    __tablename__ = "xcom"
    __table_args__ = (UniqueConstraint("task_instance_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_instance_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("task_instance.id", ondelete="CASCADE")
    )
    key: Mapped[str] = mapped_column(Identifier)
    value: Mapped[str | None] = mapped_column(LongText)
    reference: Mapped[str | None] = mapped_column(Text)
    #: Bytes of the value's JSON text (None in rows older than the column).
    size: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Variable(Base):
    """A named value tasks can read (``spawnflow variables``)."""

    __tablename__ = "variable"

    key: Mapped[str] = mapped_column(Identifier, primary_key=True)
    value: Mapped[str] = mapped_column(LongText)
    description: Mapped[str | None] = mapped_column(Text)


class Connection(Base):
    """How to reach an external system (``spawnflow connections``), read by tasks and
    XCom backends through their supervisor."""

    __tablename__ = "connection"

    conn_id: Mapped[str] = mapped_column(Identifier, primary_key=True)
    conn_type: Mapped[str] = mapped_column(String(100))
    host: Mapped[str | None] = mapped_column(Text)
    port: Mapped[int | None] = mapped_column(Integer)
    login: Mapped[str | None] = mapped_column(Text)
    password: Mapped[str | None] = mapped_column(Text)
    schema: Mapped[str | None] = mapped_column(Text)
    #: A JSON object of further options.
    extra: Mapped[str | None] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
