"""The ``backfill`` table: a request to run a Dag over past logical dates (Airflow 3's).

A backfill records what was asked (the Dag, the range of logical dates, which dates
that have a run already are run again, how many of its runs may run at once, the conf)
and when it completed. Its runs are ordinary Dag runs that point to it
(``dag_run.backfill_id``); the scheduler starts them within the backfill's own
``max_active_runs``, apart from the Dag's, and marks the backfill completed once every
one of them has finished.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from spawnflow.models.base import Base, Identifier
from spawnflow.models.job import utcnow


class Backfill(Base):
    """One ``spawnflow dags backfill`` request, until every run it made has finished."""

    __tablename__ = "backfill"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(
        Identifier, ForeignKey("dag.dag_id", ondelete="CASCADE"), index=True
    )
    #: The first and the last logical date asked for (both included).
    from_date: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    to_date: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    #: A :class:`~spawnflow.comms.states.ReprocessBehavior` value.
    reprocess_behavior: Mapped[str] = mapped_column(String(20))
    max_active_runs: Mapped[int] = mapped_column(Integer)
    #: The JSON object the new runs got as their conf.
    conf: Mapped[str] = mapped_column(Text, default="{}")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    #: When its last run finished (None while it has runs to go).
    completed_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
