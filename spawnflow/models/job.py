"""The ``job`` table: one row per long-running spawnflow process, as in Airflow.

Each Dag processor, scheduler, executor worker and triggerer records itself here and
heartbeats, so that a new scheduler can tell a live peer from one that died.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from spawnflow.comms.states import JobState
from spawnflow.models.base import Base


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Job(Base):
    """A spawnflow process: its role, where it runs, and when it last showed signs of life."""

    __tablename__ = "job"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_type: Mapped[str] = mapped_column(String(40), index=True)
    state: Mapped[str] = mapped_column(String(20), default=JobState.RUNNING)
    hostname: Mapped[str] = mapped_column(String(255), default="")
    pid: Mapped[int] = mapped_column(Integer)
    start_date: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    end_date: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    latest_heartbeat: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
