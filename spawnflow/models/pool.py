"""The ``pool`` table: named sets of slots that bound how many tasks run at once.

A task names its pool (``default_pool`` unless it says otherwise) and how many of the
pool's slots a try takes (``pool_slots``). The scheduler queues a task instance only if
the slots its pool's queued and running task instances hold (and deferred ones, where the
pool says so) leave room; it locks the pool rows while it counts and queues, so two
schedulers never fill the same free slot.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Integer, Text
from sqlalchemy.orm import Mapped, mapped_column

from spawnflow.models.base import Base, Identifier

#: The pool every task uses unless it names another; the migration creates it.
DEFAULT_POOL = "default_pool"
DEFAULT_POOL_SLOTS = 128


class Pool(Base):
    """A pool: its name, how many slots it has and whether deferred tasks hold them."""

    __tablename__ = "pool"

    pool: Mapped[str] = mapped_column(Identifier, primary_key=True)
    slots: Mapped[int] = mapped_column(Integer)
    description: Mapped[str | None] = mapped_column(Text)
    #: Deferred task instances count against the pool's slots (Airflow's default: no).
    include_deferred: Mapped[bool] = mapped_column(Boolean, default=False)
