"""Messages between a task's supervisor and its XCom helper process (role ``xcom-helper``)."""

from __future__ import annotations

from spawnflow.bootstrap.wire import Message, Request, Response
from spawnflow.sdk.xcom_backend import XComRef


class StoreXCom(Request):
    """Keep a value whose JSON text is ``value``; answered with XComStored."""

    ref: XComRef
    value: str


class XComStored(Response):
    #: Where the backend keeps the value; None: keep ``value`` in the database.
    reference: str | None


class LoadXCom(Request):
    """The JSON text of the value kept at ``reference``; answered with XComLoaded."""

    ref: XComRef
    reference: str


class XComLoaded(Response):
    value: str


class PurgeXCom(Request):
    """Delete the value kept at ``reference``; answered with Done."""

    ref: XComRef
    reference: str


class BackendDescription(Message):
    """What a helper found when it loaded the configured backend (its first message)."""

    backend: str
    in_helper: bool
    #: Why the backend cannot be used, in one sentence; None when it can.
    error: str | None = None
