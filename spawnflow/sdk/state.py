"""State stores: small values a task keeps across its tries, an asset watcher across
triggerer restarts.

Inside a task, ``get_current_context()["task_state"]`` is the task instance's store;
inside an asset watcher's trigger, ``self.asset_state`` is the asset's::

    store = get_current_context()["task_state"]
    job_id = store.get("job_id")
    if job_id is None:
        store.set("job_id", submit_the_job())      # a retry finds it and does not submit again

Values are what XComs take (JSON plus datetimes, sets, bytes…). Each store has sync
accessors (``get``, ``set``, ``delete``, ``clear``) and async ones (``aget``, ``aset``,
``adelete``, ``aclear``) for triggers and ``async def`` tasks. **No async accessor runs
blocking work on the event loop's thread**: the request to the parent, the JSON
encoding and every backend hook run in a worker thread (``asyncio.to_thread``), unless
the backend implements a hook natively async.

Where values live is ``[state_store] backend``: ``database`` (the default: the metadata
database, through the process's parent), ``objectstorage`` (objects under ``[state_store]
objectstorage_path``; smaller than ``objectstorage_threshold`` bytes stay in the
database), or a :class:`StateStoreBackend` subclass named ``module:Class``. A backend
runs in the process that uses the store (the task process, the trigger runner): those
run user code already and start no children of spawnflow's, so a backend's clients and
threads are safe there.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from spawnflow.comms.state import (
    ClearState,
    DeleteState,
    GetState,
    SetState,
    StateRef,
    StateReplaced,
    StateValue,
)
from spawnflow.sdk.names import check_id

if TYPE_CHECKING:
    from spawnflow.bootstrap.settings import Settings

__all__ = ["StateRef", "StateStore", "StateStoreBackend"]

#: The backends named by a word rather than an import string.
BUILT_IN = {
    "database": "spawnflow.sdk.state:DatabaseStateBackend",
    "objectstorage": "spawnflow.xcoms.objectstorage:ObjectStorageStateBackend",
}


class StateStoreBackend:
    """Base class of state store backends.

    Sync hooks, in the order they run: ``serialize`` then ``store`` for a set, ``load``
    then ``deserialize`` for a get, ``purge`` for a value replaced or deleted. Each has an
    async variant (``aserialize``, ``astore``, ``aload``, ``adeserialize``, ``apurge``)
    that runs the sync hook in a worker thread; a natively async backend overrides the
    variants, and must then never block in them. Subclasses implement ``store``,
    ``load`` and ``purge``; the class is instantiated once per process with the
    settings snapshot.
    """

    #: Values are JSON text in the metadata database: no hook runs (the default backend).
    keeps_values_in_database: ClassVar[bool] = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def serialize(self, text: str, *, ref: StateRef) -> bytes:
        """The bytes to keep for a value whose JSON text is ``text``."""
        return text.encode()

    def deserialize(self, data: bytes, *, ref: StateRef) -> str:
        """The JSON text back from what :meth:`serialize` made."""
        return data.decode()

    def store(self, data: bytes, *, ref: StateRef) -> str | None:
        """Keep ``data``; the reference the row keeps, or None to keep the value in the
        database instead."""
        raise NotImplementedError(f"{type(self).__name__} does not implement store()")

    def load(self, reference: str, *, ref: StateRef) -> bytes:
        raise NotImplementedError(f"{type(self).__name__} does not implement load()")

    def purge(self, reference: str, *, ref: StateRef) -> None:
        """Delete what :meth:`store` kept under ``reference`` (gone already is fine)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement purge()")

    async def aserialize(self, text: str, *, ref: StateRef) -> bytes:
        return await off_loop(self.serialize, text, ref=ref)

    async def adeserialize(self, data: bytes, *, ref: StateRef) -> str:
        return await off_loop(self.deserialize, data, ref=ref)

    async def astore(self, data: bytes, *, ref: StateRef) -> str | None:
        return await off_loop(self.store, data, ref=ref)

    async def aload(self, reference: str, *, ref: StateRef) -> bytes:
        return await off_loop(self.load, reference, ref=ref)

    async def apurge(self, reference: str, *, ref: StateRef) -> None:
        await off_loop(self.purge, reference, ref=ref)


class DatabaseStateBackend(StateStoreBackend):
    """The default: values are JSON text in the metadata database."""

    keeps_values_in_database: ClassVar[bool] = True

    def store(self, data: bytes, *, ref: StateRef) -> str | None:
        return None

    def load(self, reference: str, *, ref: StateRef) -> bytes:
        raise LookupError(
            f"state {ref.key!r} is kept at {reference}, by a backend other than the "
            "database; set [state_store] backend to that backend to read it"
        )

    def purge(self, reference: str, *, ref: StateRef) -> None:
        pass  # kept by another backend: left where it is


def load_backend(settings: Settings) -> StateStoreBackend:
    """The configured backend, made once per process; ValueError naming the setting."""
    name = settings.state_store.backend
    cached = _backends.get(name)
    if cached is not None:
        return cached
    reference = BUILT_IN.get(name, name)
    module_name, _, attribute = reference.rpartition(":")
    where = f"[state_store] backend = {name!r}"
    try:
        kind = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"{where} cannot be loaded: {error}") from None
    if not (isinstance(kind, type) and issubclass(kind, StateStoreBackend)):
        raise ValueError(f"{where}: {reference} is not a subclass of StateStoreBackend")
    backend = _backends[name] = kind(settings)
    return backend


_backends: dict[str, StateStoreBackend] = {}


class StateStore:
    """The state of one owner (a task instance, an asset): read and written through
    the process's parent, values through the configured backend.

    ``ask`` sends a request to the parent and returns its answer (raising on an error
    answer); it is called from a worker thread by the async accessors.
    """

    def __init__(self, scope: str, owner: tuple[str, ...], ask: Callable[[Any], Any],
                 backend: Callable[[], StateStoreBackend]):  # fmt: skip
        self.scope, self.owner = scope, owner
        self._ask, self._backend = ask, backend

    def __repr__(self) -> str:
        return f"<StateStore {self.scope} {'/'.join(self.owner)}>"

    def _ref(self, key: str, size: int = 0) -> StateRef:
        return StateRef(self.scope, self.owner, check_id(key, "state key"), size)

    # -- sync accessors -----------------------------------------------------------------

    def get(self, key: str, default: Any = None) -> Any:
        """The value kept under ``key``, or ``default``."""
        ref = self._ref(key)
        answer: StateValue = self._ask(lambda id: GetState(id=id, ref=ref))
        if answer.reference is not None:
            backend = self._backend()
            text = backend.deserialize(backend.load(answer.reference, ref=ref), ref=ref)
        elif answer.value is not None:
            text = answer.value
        else:
            return default
        return _decode(text)

    def set(self, key: str, value: Any) -> None:
        """Keep ``value`` under ``key`` (replacing what was there)."""
        text = _encode(value, key)
        ref = self._ref(key, len(text.encode()))
        backend = self._backend()
        reference = None
        if not backend.keeps_values_in_database:
            reference = backend.store(backend.serialize(text, ref=ref), ref=ref)
        try:
            answer = self._ask(_set_request(ref, text, reference))
        except BaseException:
            if reference is not None:  # refused (too large, say): what was written goes
                backend.purge(reference, ref=ref)
            raise
        self._purge(backend, answer, ref)

    def delete(self, key: str) -> None:
        ref = self._ref(key)
        self._purge(self._backend(), self._ask(lambda id: DeleteState(id=id, ref=ref)), ref)

    def clear(self) -> None:
        """Forget every key of this store."""
        ref = StateRef(self.scope, self.owner, "")
        self._purge(self._backend(), self._ask(lambda id: ClearState(id=id, ref=ref)), ref)

    def _purge(self, backend: StateStoreBackend, answer: StateReplaced, ref: StateRef) -> None:
        for reference in answer.previous:
            backend.purge(reference, ref=ref)

    # -- async accessors: nothing blocking on the loop's thread ----------------------------

    async def aget(self, key: str, default: Any = None) -> Any:
        ref = self._ref(key)
        answer: StateValue = await off_loop(self._ask, lambda id: GetState(id=id, ref=ref))
        if answer.reference is not None:
            backend = await self._abackend()
            data = await backend.aload(answer.reference, ref=ref)
            text = await backend.adeserialize(data, ref=ref)
        elif answer.value is not None:
            text = answer.value
        else:
            return default
        return await off_loop(_decode, text)

    async def aset(self, key: str, value: Any) -> None:
        text, size = await off_loop(_encode_sized, value, key)
        ref = self._ref(key, size)
        backend = await self._abackend()
        reference = None
        if not backend.keeps_values_in_database:
            data = await backend.aserialize(text, ref=ref)
            reference = await backend.astore(data, ref=ref)
        try:
            answer = await off_loop(self._ask, _set_request(ref, text, reference))
        except BaseException:
            if reference is not None:  # refused (too large, say): what was written goes
                await backend.apurge(reference, ref=ref)
            raise
        await self._apurge(backend, answer, ref)

    async def adelete(self, key: str) -> None:
        ref = self._ref(key)
        answer = await off_loop(self._ask, lambda id: DeleteState(id=id, ref=ref))
        await self._apurge(await self._abackend(), answer, ref)

    async def aclear(self) -> None:
        ref = StateRef(self.scope, self.owner, "")
        answer = await off_loop(self._ask, lambda id: ClearState(id=id, ref=ref))
        await self._apurge(await self._abackend(), answer, ref)

    async def _abackend(self) -> StateStoreBackend:
        # The first call imports and builds the backend (fsspec, s3fs…): not on the loop.
        return await off_loop(self._backend)

    async def _apurge(self, backend: StateStoreBackend, answer: StateReplaced,
                      ref: StateRef) -> None:  # fmt: skip
        for reference in answer.previous:
            await backend.apurge(reference, ref=ref)


async def off_loop(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` in a worker thread: the event loop's thread never
    blocks on it. (asyncio is imported here: a process that never awaits pays nothing.)"""
    import asyncio

    return await asyncio.to_thread(function, *args, **kwargs)


def _set_request(ref: StateRef, text: str, reference: str | None) -> Callable[[int], SetState]:
    if reference is None:
        return lambda id: SetState(id=id, ref=ref, value=text)
    return lambda id: SetState(id=id, ref=ref, reference=reference)


def _encode(value: Any, key: str) -> str:
    from spawnflow.sdk import xcom

    return xcom.encode(value, subject=f"state {key!r}")


def _encode_sized(value: Any, key: str) -> tuple[str, int]:
    text = _encode(value, key)
    return text, len(text.encode())


def _decode(text: str) -> Any:
    from spawnflow.sdk import xcom

    return xcom.decode(text)
