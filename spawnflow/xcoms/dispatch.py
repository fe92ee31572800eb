"""XCom dispatch: answer one store, load or purge call with a backend.

The one place that turns a call into backend hooks and a backend's failure into a
typed answer naming the XCom and the backend: the XCom helper process, the in-worker
path of a backend that says ``in_helper = False``, and the tests all call :func:`answer`.

A backend is user code, so what it gives back is checked before anyone uses it: the
hooks' types, a reference short enough for the metadata database, and a loaded value
that is the JSON text that was pushed (its length, when known, and at most
``[core] max_xcom_size`` bytes). What fails a check fails that one call, never the
process that made it.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap import wire
from spawnflow.comms.states import ErrorKind
from spawnflow.comms.tasks import Done
from spawnflow.comms.xcoms import LoadXCom, PurgeXCom, StoreXCom, XComLoaded, XComStored

#: The longest reference a backend may return: where the value is kept (an object's
#: URL, say), which every metadata database keeps in full.
MAX_REFERENCE_LENGTH = 4096
#: How often a purge is tried before it is reported as failed (a backend's brief
#: refusal, or a helper that died under the call, may pass).
PURGE_TRIES = 3

_VERBS = {StoreXCom: "store", LoadXCom: "load", PurgeXCom: "purge"}


class Refused(Exception):
    """What a backend gave back fails a check; ``kind`` is the error's kind."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.XCOM_BACKEND_ERROR):
        super().__init__(message)
        self.kind = kind


def answer(backend: Any, request: wire.Request) -> wire.Response:
    """Run one call on ``backend``; its result, or a typed error naming the XCom."""
    verb = _VERBS.get(type(request))
    if verb is None:
        return wire.ErrorResponse(
            id=request.id, kind=ErrorKind.UNKNOWN_REQUEST, message=type(request).__name__
        )
    assert isinstance(request, StoreXCom | LoadXCom | PurgeXCom)
    kind = ErrorKind.XCOM_BACKEND_ERROR
    try:
        if isinstance(request, StoreXCom):
            return XComStored(id=request.id, reference=_store(backend, request))
        if isinstance(request, LoadXCom):
            return XComLoaded(id=request.id, value=_load(backend, request))
        backend.purge(request.reference, ref=request.ref)
        return Done(id=request.id)
    except Refused as refused:
        cause, kind = str(refused), refused.kind
    except Exception as error:  # noqa: BLE001 - a backend's failure goes back to the caller
        cause = describe_error(error)
    ref = request.ref
    return wire.ErrorResponse(
        id=request.id, kind=kind,
        message=f"the XCom backend {backend_name(backend)} could not {verb} XCom {ref.key!r} "
        f"of task {ref.task_id!r} (pid {os.getpid()}): {cause}",
    )  # fmt: skip


def _store(backend: Any, request: StoreXCom) -> str | None:
    data = backend.serialize(request.value, ref=request.ref)
    if not isinstance(data, bytes | bytearray):
        raise Refused(f"serialize() returned a {type(data).__name__}, not bytes")
    reference = backend.store(bytes(data), ref=request.ref)
    if reference is None:
        return None
    if not isinstance(reference, str):
        raise Refused(f"store() returned a {type(reference).__name__}, not a str")
    if len(reference) > MAX_REFERENCE_LENGTH:
        # No row will point at what it stored: it must not stay behind.
        try:
            backend.purge(reference, ref=request.ref)
            left = "what it stored was deleted again"
        except Exception as error:  # noqa: BLE001 - reported with the refusal
            left = f"what it stored could not be deleted ({describe_error(error)})"
        raise Refused(
            f"store() returned a reference of {len(reference)} characters; a reference says "
            f"where the value is kept and may be at most {MAX_REFERENCE_LENGTH}; {left}"
        )
    return reference


def _load(backend: Any, request: LoadXCom) -> str:
    data = backend.load(request.reference, ref=request.ref)
    if not isinstance(data, bytes | bytearray):
        raise Refused(f"load() returned a {type(data).__name__}, not bytes")
    text = backend.deserialize(bytes(data), ref=request.ref)
    if not isinstance(text, str):
        raise Refused(f"deserialize() returned a {type(text).__name__}, not a str")
    size = len(text.encode())
    limit = settings_module.current().core.max_xcom_size
    if size > limit:
        raise Refused(
            f"the value it gave back is {size} bytes; [core] max_xcom_size is {limit}",
            ErrorKind.XCOM_TOO_LARGE,
        )
    if request.ref.size and size != request.ref.size:
        raise Refused(
            f"the value it gave back is {size} bytes of JSON, but the value pushed was "
            f"{request.ref.size}: it is not what was stored"
        )
    try:
        msgspec.json.decode(text)
    except msgspec.DecodeError as error:
        raise Refused(f"the value it gave back is not the JSON text pushed: {error}") from None
    return text


def backend_name(backend: Any) -> str:
    """``module:Class`` of a backend, as ``[core] xcom_backend`` names it."""
    cls = type(backend)
    return f"{cls.__module__}:{cls.__qualname__}"


def describe_error(error: BaseException) -> str:
    """``Type: first line of the message``, for a one-sentence error."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
