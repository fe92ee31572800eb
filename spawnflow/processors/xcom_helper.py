"""The XCom helper process (role ``xcom-helper``): runs the configured XCom backend.

Started by a task's supervisor on the first call that needs the backend, and stopped
when the task ends (or by ``spawnflow xcom`` and ``tasks clear`` for their calls). It
answers StoreXCom, LoadXCom and PurgeXCom one at a time, in the order they came, each
with a response carrying the request's id. It never opens the database: a backend
that reads a Variable asks the supervisor, through :mod:`spawnflow.sdk.runtime`.

Its first message says whether the backend loaded (:class:`BackendDescription`), so
that a backend that cannot be imported or refuses its settings is reported once, in
one sentence, by whoever started the helper.
"""

from __future__ import annotations

import os
from typing import Any

from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap import wire
from spawnflow.comms.tasks import Done
from spawnflow.comms.xcoms import (
    BackendDescription,
    LoadXCom,
    PurgeXCom,
    StoreXCom,
    XComLoaded,
    XComStored,
)
from spawnflow.sdk import runtime

BACKEND_ERROR = "XCOM_BACKEND_ERROR"


def serve(channel: wire.Channel, *, describe_only: bool = False,
          context: dict[str, Any] | None = None) -> None:  # fmt: skip
    """Load the backend, say so, then answer calls until the channel closes."""
    from spawnflow import xcoms

    settings = settings_module.current()
    name = settings.core.xcom_backend
    try:
        backend_class = xcoms.import_backend(name)
        backend = backend_class(settings)
    except xcoms.BackendError as error:
        channel.send(BackendDescription(backend=name, in_helper=True, error=str(error)))
        return
    except Exception as error:  # noqa: BLE001 - a backend refusing its settings, in one sentence
        channel.send(BackendDescription(
            backend=name, in_helper=True,
            error=f"[core] xcom_backend = {name!r} cannot start: {_describe(error)}",
        ))  # fmt: skip
        return
    channel.send(BackendDescription(backend=name, in_helper=bool(backend_class.in_helper)))
    if describe_only:
        return
    runtime.install(channel, context or {})
    while True:
        try:
            request = channel.recv()
        except EOFError:
            return  # our supervisor is done with us
        if isinstance(request, wire.Request):
            response = answer(backend, request)
            try:
                channel.send(response)
            except (TypeError, ValueError, OverflowError) as error:  # msgspec cannot encode it
                channel.send(wire.ErrorResponse(
                    id=request.id, kind=BACKEND_ERROR,
                    message=f"the XCom backend's answer cannot be sent: {_describe(error)}",
                ))  # fmt: skip


def answer(backend: Any, request: wire.Request) -> wire.Response:
    """Run one call on ``backend``; its result, or a typed error naming the XCom."""
    try:
        if isinstance(request, StoreXCom):
            data = backend.serialize(request.value, ref=request.ref)
            reference = backend.store(data, ref=request.ref)
            if reference is not None and not isinstance(reference, str):
                raise TypeError(f"store() returned a {type(reference).__name__}, not a str")
            return XComStored(id=request.id, reference=reference)
        if isinstance(request, LoadXCom):
            data = backend.load(request.reference, ref=request.ref)
            text = backend.deserialize(data, ref=request.ref)
            if not isinstance(text, str):
                raise TypeError(f"deserialize() returned a {type(text).__name__}, not a str")
            return XComLoaded(id=request.id, value=text)
        if isinstance(request, PurgeXCom):
            backend.purge(request.reference, ref=request.ref)
            return Done(id=request.id)
    except Exception as error:  # noqa: BLE001 - a backend's failure goes back to the caller
        ref = request.ref
        verb = {"StoreXCom": "store", "LoadXCom": "load", "PurgeXCom": "purge"}[
            type(request).__name__
        ]
        return wire.ErrorResponse(
            id=request.id, kind=BACKEND_ERROR,
            message=f"the XCom backend could not {verb} XCom {ref.key!r} of task "
            f"{ref.task_id!r} (pid {os.getpid()}): {_describe(error)}",
        )  # fmt: skip
    return wire.ErrorResponse(id=request.id, kind="UNKNOWN_REQUEST", message=type(request).__name__)


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
