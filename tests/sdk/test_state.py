"""State stores in one process: the accessors, the parent's answers (a fake ``ask``, in
process: nothing crosses a process boundary here) and the backends' hooks."""

from __future__ import annotations

import asyncio
import threading

import pytest

from spawnflow.comms import state as messages
from spawnflow.sdk.state import DatabaseStateBackend, StateStore, StateStoreBackend


class Parent:
    """Answers state requests from a dict, as the supervisor does from rows."""

    def __init__(self):
        self.rows: dict[str, tuple[str | None, str | None]] = {}
        self.threads: set[int] = set()

    def ask(self, make):
        self.threads.add(threading.get_ident())
        request = make(1)
        key = request.ref.key
        if isinstance(request, messages.GetState):
            value, reference = self.rows.get(key, (None, None))
            return messages.StateValue(id=1, value=value, reference=reference)
        if isinstance(request, messages.ClearState):
            gone = [r for _, r in self.rows.values() if r]
            self.rows.clear()
            return messages.StateReplaced(id=1, previous=gone)
        _, old = self.rows.pop(key, (None, None))
        if isinstance(request, messages.SetState):
            self.rows[key] = (request.value, request.reference)
        return messages.StateReplaced(id=1, previous=[old] if old else [])


class RecordingBackend(StateStoreBackend):
    """Keeps bytes in memory and records the thread each sync hook runs in."""

    def __init__(self):
        super().__init__(settings=None)
        self.objects: dict[str, bytes] = {}
        self.threads: dict[str, set[int]] = {}
        self.purged: list[str] = []

    def _mark(self, hook: str) -> None:
        self.threads.setdefault(hook, set()).add(threading.get_ident())

    def serialize(self, text, *, ref):
        self._mark("serialize")
        return text.encode()[::-1]

    def deserialize(self, data, *, ref):
        self._mark("deserialize")
        return data[::-1].decode()

    def store(self, data, *, ref):
        self._mark("store")
        reference = f"mem://{ref.key}/{len(self.objects)}"
        self.objects[reference] = data
        return reference

    def load(self, reference, *, ref):
        self._mark("load")
        return self.objects[reference]

    def purge(self, reference, *, ref):
        self._mark("purge")
        self.purged.append(reference)


def store_with(backend) -> tuple[StateStore, Parent]:
    parent = Parent()
    return StateStore("task", ("dag", "run", "task"), parent.ask, lambda: backend), parent


def test_values_round_trip_and_a_replaced_object_is_purged():
    backend = RecordingBackend()
    store, parent = store_with(backend)
    store.set("job", {"id": 7, "tags": {"a"}})
    first = parent.rows["job"][1]
    store.set("job", {"id": 8})

    assert store.get("job") == {"id": 8}
    assert store.get("missing", default="nothing") == "nothing"
    assert backend.purged == [first]
    store.delete("job")
    assert store.get("job") is None
    store.set("a", 1)
    store.set("b", 2)
    store.clear()
    assert parent.rows == {}
    assert len(backend.purged) == 4


def test_the_database_backend_keeps_json_in_the_row_and_runs_no_hook():
    store, parent = store_with(DatabaseStateBackend(settings=None))
    store.set("n", [1, 2])
    assert parent.rows["n"] == ("[1,2]", None)
    assert store.get("n") == [1, 2]


def test_no_async_accessor_runs_blocking_work_on_the_loops_thread():
    backend = RecordingBackend()
    store, parent = store_with(backend)

    async def use_every_accessor() -> int:
        await store.aset("k", "x" * 10_000)
        await store.aset("k", "replaced")  # purges the first object
        assert await store.aget("k") == "replaced"
        await store.adelete("k")
        await store.aset("other", 1)
        await store.aclear()
        return threading.get_ident()

    loop_thread = asyncio.run(use_every_accessor())

    assert set(backend.threads) == {"serialize", "store", "load", "deserialize", "purge"}
    for hook, threads in backend.threads.items():
        assert loop_thread not in threads, f"{hook} ran on the event loop's thread"
    assert loop_thread not in parent.threads  # the request to the parent too


def test_a_key_that_is_not_an_id_is_refused():
    store, _ = store_with(RecordingBackend())
    with pytest.raises(ValueError, match="state key 'a b' must be 1-250 letters"):
        store.get("a b")


def test_a_value_that_cannot_be_kept_names_the_key():
    store, _ = store_with(RecordingBackend())
    with pytest.raises(ValueError, match=r"state 'k' is a builtins\.object"):
        store.set("k", object())


def test_an_object_written_for_a_value_the_parent_refuses_is_purged():
    from spawnflow.sdk.runtime import SupervisorError

    backend = RecordingBackend()

    def refuse(make):
        request = make(1)
        if isinstance(request, messages.SetState):
            raise SupervisorError("STATE_TOO_LARGE", "too large")
        return messages.StateValue(id=1)

    store = StateStore("task", ("d", "r", "t"), refuse, lambda: backend)
    with pytest.raises(SupervisorError):
        store.set("k", "x" * 100)
    with pytest.raises(SupervisorError):
        asyncio.run(store.aset("k", "y" * 100))
    assert sorted(backend.purged) == sorted(backend.objects)  # nothing left behind
    assert len(backend.purged) == 2


def test_object_storage_keeps_small_values_in_the_row_and_gzips_the_others(tmp_path, make_settings):
    from spawnflow.xcoms.objectstorage import ObjectStorageStateBackend

    settings = make_settings(**{
        "state_store.backend": "objectstorage",
        "state_store.objectstorage_path": tmp_path.as_uri(),
        "state_store.objectstorage_threshold": "1024",
        "state_store.objectstorage_compression": "gzip",
    })  # fmt: skip
    store, parent = store_with(ObjectStorageStateBackend(settings))
    store.set("small", "x" * 10)
    store.set("big", "y" * 5000)

    assert parent.rows["small"] == ('"xxxxxxxxxx"', None)  # below the threshold: in the row
    value, reference = parent.rows["big"]
    assert value is None
    assert reference is not None
    (stored,) = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert stored.read_bytes()[:2] == b"\x1f\x8b"  # gzip's magic number
    assert store.get("big") == "y" * 5000
    assert asyncio.run(store.aget("big")) == "y" * 5000
    store.delete("big")
    assert not stored.exists()  # the replaced object is purged


def test_the_default_threshold_offloads_every_value(tmp_path, make_settings):
    from spawnflow.xcoms.objectstorage import ObjectStorageStateBackend

    settings = make_settings(**{"state_store.backend": "objectstorage",
                                "state_store.objectstorage_path": tmp_path.as_uri()})  # fmt: skip
    assert settings.state_store.objectstorage_threshold == 0
    store, parent = store_with(ObjectStorageStateBackend(settings))
    store.set("tiny", 1)
    assert parent.rows["tiny"][0] is None
    assert parent.rows["tiny"][1] is not None
    assert store.get("tiny") == 1


class NativelyAsyncBackend(RecordingBackend):
    """Overrides the async hooks: the accessors await them, and never the sync ones."""

    def __init__(self):
        super().__init__()
        self.awaited: list[str] = []

    async def aserialize(self, text, *, ref):
        self.awaited.append("aserialize")
        return text.encode()

    async def adeserialize(self, data, *, ref):
        self.awaited.append("adeserialize")
        return data.decode()

    async def astore(self, data, *, ref):
        self.awaited.append("astore")
        self.objects[ref.key] = data
        return ref.key

    async def aload(self, reference, *, ref):
        self.awaited.append("aload")
        return self.objects[reference]

    async def apurge(self, reference, *, ref):
        self.awaited.append("apurge")


def test_a_natively_async_backend_is_awaited_not_run_in_a_thread():
    backend = NativelyAsyncBackend()
    store, _ = store_with(backend)

    async def use() -> object:
        await store.aset("k", {"v": 1})
        await store.aset("k", {"v": 2})
        return await store.aget("k")

    assert asyncio.run(use()) == {"v": 2}
    assert backend.awaited == ["aserialize", "astore", "aserialize", "astore", "apurge",
                               "aload", "adeserialize"]  # fmt: skip
    assert backend.threads == {}  # no sync hook ran
