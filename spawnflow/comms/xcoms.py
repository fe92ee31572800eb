"""Messages between a task's supervisor and its XCom helper process (role ``xcom-helper``)."""

from __future__ import annotations

import msgspec

from spawnflow.bootstrap.wire import Message, Request, Response


class XComRef(msgspec.Struct, frozen=True):
    """Which XCom a backend call is about."""

    dag_id: str
    run_id: str
    task_id: str
    key: str
    #: Bytes of the value's JSON text (0 where it is not known, as in purge and load).
    size: int = 0


class StoreXCom(Request, frozen=True):
    """Keep a value whose JSON text is ``value``; answered with XComStored."""

    ref: XComRef
    value: str


class XComStored(Response, frozen=True):
    #: Where the backend keeps the value; None: keep ``value`` in the database.
    reference: str | None


class LoadXCom(Request, frozen=True):
    """The JSON text of the value kept at ``reference``; answered with XComLoaded."""

    ref: XComRef
    reference: str


class XComLoaded(Response, frozen=True):
    value: str


class PurgeXCom(Request, frozen=True):
    """Delete the value kept at ``reference``; answered with Done."""

    ref: XComRef
    reference: str


class BackendDescription(Message, frozen=True):
    """What a helper found when it loaded the configured backend (its first message)."""

    backend: str
    in_helper: bool
    #: Why the backend cannot be used, in one sentence; None when it can.
    error: str | None = None
