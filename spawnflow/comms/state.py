"""State stores on the wire: a task process or a trigger asks its parent for a row.

A state store keeps small values for one owner across tries (a task instance) or
across triggerer restarts (an asset, for its watchers). The process that uses the
store never opens the database: it asks the process that does (the task's supervisor,
the triggerer), which answers with the value kept in the row, or with the reference of
an object the configured backend wrote.
"""

from __future__ import annotations

import msgspec

from spawnflow.bootstrap.wire import Request, Response

#: ``StateRef.scope`` of a task instance's store and of an asset's.
TASK, ASSET = "task", "asset"


class StateRef(msgspec.Struct, frozen=True):
    """Which value a state store call is about."""

    scope: str
    #: (dag_id, run_id, task_id) for a task's store; (asset URI,) for an asset's.
    owner: tuple[str, ...]
    key: str
    #: Bytes of the value's JSON text (0 where it is not known).
    size: int = 0


class GetState(Request, frozen=True):
    """The value kept under ``ref.key``; answered with StateValue."""

    ref: StateRef


class StateValue(Response, frozen=True):
    #: The JSON text kept in the database, or None.
    value: str | None = None
    #: Where the backend keeps the value instead, or None.
    reference: str | None = None


class SetState(Request, frozen=True):
    """Keep ``value`` (JSON text) or ``reference`` under ``ref.key``; answered with
    StateReplaced."""

    ref: StateRef
    value: str | None = None
    reference: str | None = None


class DeleteState(Request, frozen=True):
    """Forget ``ref.key``; answered with StateReplaced."""

    ref: StateRef


class ClearState(Request, frozen=True):
    """Forget every key of ``ref.owner`` (``ref.key`` is ignored); answered with
    StateReplaced."""

    ref: StateRef


class StateReplaced(Response, frozen=True):
    """The references of the objects the write replaced or removed, for the caller's
    backend to purge."""

    previous: list[str] = msgspec.field(default_factory=list)


#: Every request of a state store.
REQUESTS = (GetState, SetState, DeleteState, ClearState)
