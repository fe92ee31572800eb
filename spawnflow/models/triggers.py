"""Triggers, and the state stores of task instances and assets.

A :class:`Trigger` row is what a deferred task instance waits for (its ``trigger_id``)
or an asset watcher (``asset_id`` and ``watcher_name``). A triggerer claims a row by
writing its job id into ``triggerer_id``; a row whose triggerer is gone is claimed
again by another. State rows keep small values (or the reference of an object a
backend wrote) across tries, resumes and restarts.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    DateTime,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    select,
)
from sqlalchemy.orm import Mapped, Session, mapped_column

from spawnflow.bootstrap import wire
from spawnflow.comms.state import (
    ClearState,
    DeleteState,
    GetState,
    SetState,
    StateRef,
    StateReplaced,
    StateValue,
)
from spawnflow.comms.states import ErrorKind
from spawnflow.models.base import Base, Identifier
from spawnflow.models.dag import LongText
from spawnflow.models.job import utcnow

#: The longest import path of a trigger class.
MAX_CLASSPATH = 1000


class Trigger(Base):
    """A trigger to run on a triggerer: its class and its keyword arguments (JSON)."""

    __tablename__ = "trigger"
    # AUTOINCREMENT: SQLite would give a deleted trigger's id to the next one, which a
    # runner still running the old trigger would take for its own.
    __table_args__ = (UniqueConstraint("asset_id", "watcher_name"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    classpath: Mapped[str] = mapped_column(String(MAX_CLASSPATH))
    kwargs: Mapped[str] = mapped_column(LongText)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    #: The job id of the triggerer that runs it; None until one claims it.
    triggerer_id: Mapped[int | None] = mapped_column(Integer, index=True)
    #: For an asset watcher: the asset it watches, and the watcher's name.
    asset_id: Mapped[int | None] = mapped_column(
        Integer, ForeignKey("asset.id", ondelete="CASCADE")
    )
    watcher_name: Mapped[str | None] = mapped_column(Identifier)


class TaskStateValue(Base):
    """One key of a task instance's state store, kept across its tries."""

    __tablename__ = "task_state"
    __table_args__ = (UniqueConstraint("task_instance_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_instance_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("task_instance.id", ondelete="CASCADE")
    )
    key: Mapped[str] = mapped_column(Identifier)
    #: The value's JSON text, unless the backend keeps it at ``reference``.
    value: Mapped[str | None] = mapped_column(LongText)
    reference: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AssetStateValue(Base):
    """One key of an asset's state store (its watchers'), kept across triggerer restarts."""

    __tablename__ = "asset_state"
    __table_args__ = (UniqueConstraint("asset_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    asset_id: Mapped[int] = mapped_column(Integer, ForeignKey("asset.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(Identifier)
    value: Mapped[str | None] = mapped_column(LongText)
    reference: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


#: The task instance columns of a deferral, emptied.
NO_DEFERRAL: dict[str, Any] = dict.fromkeys(
    ("trigger_id", "trigger_timeout", "next_method", "next_kwargs")
)


def end_deferral(ti: Any) -> None:
    """Forget where ``ti`` would resume: its try ended, failed or was cleared, and the
    next try starts from the beginning (its trigger row goes with the next clean-up)."""
    for column, value in NO_DEFERRAL.items():
        setattr(ti, column, value)


# -- answering a state store's requests ------------------------------------------------


def answer_state_request(
    session: Session, request: wire.Request, *, task_instance_id: int | None = None,
    asset_id: int | None = None, max_size: int,
) -> wire.Response:  # fmt: skip
    """Answer a state store request about the task instance or the asset given.

    A value larger than ``max_size`` bytes of JSON is refused; a write that replaces
    or removes a value the backend keeps elsewhere answers with its reference, for the
    caller's backend to purge.
    """
    table: Any  # TaskStateValue or AssetStateValue: the same columns
    if task_instance_id is not None:
        table, owner = TaskStateValue, TaskStateValue.task_instance_id == task_instance_id
    else:
        assert asset_id is not None  # one or the other
        table, owner = AssetStateValue, AssetStateValue.asset_id == asset_id
    ref: StateRef = request.ref  # type: ignore[attr-defined]  # every state request has one
    if isinstance(request, ClearState):
        rows = session.scalars(select(table).where(owner)).all()
        for row in rows:
            session.delete(row)
        return StateReplaced(id=request.id, previous=[r.reference for r in rows if r.reference])
    row = session.scalar(select(table).where(owner, table.key == ref.key).with_for_update())
    if isinstance(request, GetState):
        if row is None:
            return StateValue(id=request.id)
        return StateValue(id=request.id, value=row.value, reference=row.reference)
    previous = [row.reference] if row is not None and row.reference else []
    if isinstance(request, DeleteState):
        if row is not None:
            session.delete(row)
        return StateReplaced(id=request.id, previous=previous)
    assert isinstance(request, SetState)
    # Kept here or by a backend, a value is as large as its JSON text (the caller says how
    # large an offloaded one was; an inline one is measured).
    size = len(request.value.encode()) if request.value is not None else ref.size
    if size > max_size:
        return wire.ErrorResponse(
            id=request.id, kind=ErrorKind.STATE_TOO_LARGE,
            message=f"state {ref.key!r} is {size} bytes of JSON, more than [core] "
            f"max_xcom_size ({max_size} bytes)",
        )  # fmt: skip
    if row is None:
        values = {"task_instance_id": task_instance_id} if task_instance_id is not None else {
            "asset_id": asset_id
        }  # fmt: skip
        row = table(key=ref.key, **values)
        session.add(row)
    row.value, row.reference, row.updated_at = request.value, request.reference, utcnow()
    previous = [p for p in previous if p != request.reference]
    return StateReplaced(id=request.id, previous=previous)
