"""What the Dag processor stores: Dags, their serialized form, parse errors and stats.

Files are keyed by a hash of their path: a path can be longer than the index key
that MySQL allows on a VARCHAR.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import Mapped, mapped_column

from spawnflow.models.base import Base, Identifier
from spawnflow.models.job import utcnow

#: Text that may be large: MySQL's TEXT stops at 64 KiB.
LongText = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def path_key(path: str) -> str:
    """The key of a Dag file's rows: sha256 of its absolute path."""
    return hashlib.sha256(path.encode()).hexdigest()


class DagModel(Base):
    """A Dag the Dag processor found; inactive once its file no longer defines it."""

    __tablename__ = "dag"

    dag_id: Mapped[str] = mapped_column(Identifier, primary_key=True)
    fileloc: Mapped[str] = mapped_column(String(1000))
    is_paused: Mapped[bool] = mapped_column(Boolean, default=False)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True, index=True)
    description: Mapped[str | None] = mapped_column(Text, nullable=True)
    schedule: Mapped[str] = mapped_column(String(100), default="")
    tags: Mapped[str] = mapped_column(Text, default="[]")
    max_active_runs: Mapped[int] = mapped_column(Integer, default=16)
    max_active_tasks: Mapped[int] = mapped_column(Integer, default=16)
    last_parsed_time: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))


class SerializedDagModel(Base):
    """The versioned JSON document of a Dag (see :mod:`spawnflow.sdk.serialize`)."""

    __tablename__ = "serialized_dag"

    dag_id: Mapped[str] = mapped_column(
        Identifier, ForeignKey("dag.dag_id", ondelete="CASCADE"), primary_key=True
    )
    data: Mapped[str] = mapped_column(LongText)
    dag_hash: Mapped[str] = mapped_column(String(64))
    last_updated: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ImportErrorModel(Base):
    """Why a Dag file could not be loaded: traceback, timeout or crash."""

    __tablename__ = "import_error"

    file_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    fileloc: Mapped[str] = mapped_column(String(1000))
    error: Mapped[str] = mapped_column(LongText)
    timestamp: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class DagFileModel(Base):
    """Parse statistics of one Dag file (``spawnflow dags report``)."""

    __tablename__ = "dag_file"

    file_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    fileloc: Mapped[str] = mapped_column(String(1000))
    content_hash: Mapped[str] = mapped_column(String(64))
    last_parsed: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    duration: Mapped[float] = mapped_column(Float)
    dag_count: Mapped[int] = mapped_column(Integer)
    #: ok, import error, timeout or crash
    outcome: Mapped[str] = mapped_column(String(20))
