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

from typing import Any

from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap import wire
from spawnflow.comms.states import ErrorKind
from spawnflow.comms.xcoms import BackendDescription
from spawnflow.sdk import runtime
from spawnflow.xcoms.dispatch import answer, describe_error


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
            error=f"[core] xcom_backend = {name!r} cannot start: {describe_error(error)}",
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
                    id=request.id, kind=ErrorKind.XCOM_BACKEND_ERROR,
                    message=f"the XCom backend's answer cannot be sent: {describe_error(error)}",
                ))  # fmt: skip
