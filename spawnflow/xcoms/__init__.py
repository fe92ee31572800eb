"""XCom backends: which one is configured, and checking it at start-up.

The executor worker never imports a backend's module (``[core] xcom_backend``): a
backend runs in the task's XCom helper process (:mod:`spawnflow.processors.xcom_helper`),
unless its class sets ``in_helper = False``. To learn that attribute, and to fail at
start-up rather than at the first push, :func:`check` loads the backend in a short-lived
helper child and reads its answer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import msgspec

from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings

if TYPE_CHECKING:
    from spawnflow.sdk.xcom_backend import XComBackend

#: The backends named by a word rather than an import string.
BUILT_IN = {
    "database": "spawnflow.sdk.xcom_backend:DatabaseBackend",
    "objectstorage": "spawnflow.xcoms.objectstorage:ObjectStorageBackend",
}
HELPER_TARGET = "spawnflow.processors.xcom_helper:serve"


class BackendError(UserError):
    """The configured XCom backend cannot be loaded or used."""


class BackendChoice(msgspec.Struct, frozen=True):
    """The configured backend as the supervisors need to know it."""

    name: str
    #: Whether its calls run in a helper process; False for the database backend.
    in_helper: bool

    @property
    def is_database(self) -> bool:
        return self.name == "database"


DATABASE = BackendChoice("database", in_helper=False)


def import_backend(name: str) -> type[XComBackend]:
    """The backend class ``name`` designates; BackendError saying what is wrong.

    Called where the backend may run (a helper process), never in an executor worker.
    """
    from spawnflow.sdk.xcom_backend import XComBackend

    reference = BUILT_IN.get(name, name)
    module_name, _, attribute = reference.rpartition(":") if ":" in reference else (
        reference.rpartition(".")
    )  # fmt: skip
    where = f"[core] xcom_backend = {name!r}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise BackendError(
            f"{where}: module {module_name!r} cannot be imported ({error})"
        ) from None
    except Exception as error:  # noqa: BLE001 - user code failing at import is reported
        raise BackendError(
            f"{where}: importing {module_name!r} failed with {type(error).__name__}: {error}"
        ) from None
    found = getattr(module, attribute, None)
    if found is None:
        raise BackendError(f"{where}: module {module_name!r} has no attribute {attribute!r}")
    if not (isinstance(found, type) and issubclass(found, XComBackend)):
        raise BackendError(f"{where}: {reference} is not a subclass of spawnflow.sdk.XComBackend")
    return found


def check(settings: Settings, *, method: str | None = None) -> BackendChoice:
    """Load the configured backend in a helper child and report how to route its calls.

    BackendError (one sentence) if it cannot be imported, is not a backend, or
    refuses its settings. The database backend needs no child.
    """
    name = settings.core.xcom_backend
    if name == "database":
        return DATABASE
    from spawnflow.bootstrap import launcher
    from spawnflow.bootstrap.child import ChildBootError
    from spawnflow.comms.xcoms import BackendDescription

    spec = launcher.ChildSpec(
        "xcom-helper", HELPER_TARGET, {"describe_only": True}, settings=settings
    )
    child = launcher.launch(spec, method=method)
    try:
        child.wait_ready()
        # Loading the backend is a call: it gets a call's time, from the helper's Ready.
        message = child.channel.recv(timeout=settings.xcom.helper_call_timeout)
    except (ChildBootError, EOFError, TimeoutError, OSError) as error:
        raise BackendError(
            f"[core] xcom_backend = {name!r} could not be checked: {error}"
        ) from None
    finally:
        child.stop(grace=5)
    if not isinstance(message, BackendDescription):
        raise BackendError(f"[core] xcom_backend = {name!r}: unexpected answer {message!r}")
    if message.error is not None:
        raise BackendError(message.error)
    return BackendChoice(name, in_helper=message.in_helper)
