"""State store backends and triggers for benchmarks/loop_stall.py."""

from __future__ import annotations

import asyncio
import time

from spawnflow.sdk.triggers import BaseTrigger, TriggerEvent
from spawnflow.xcoms.objectstorage import ObjectStorageStateBackend


class NaiveBackend(ObjectStorageStateBackend):
    """The before-picture: async variants that call the sync hooks on the event loop's
    thread, as Airflow's state-store accessors did (apache/airflow#72129)."""

    async def aserialize(self, text, *, ref):
        return self.serialize(text, ref=ref)

    async def adeserialize(self, data, *, ref):
        return self.deserialize(data, ref=ref)

    async def astore(self, data, *, ref):
        return self.store(data, ref=ref)

    async def aload(self, reference, *, ref):
        return self.load(reference, ref=ref)

    async def apurge(self, reference, *, ref):
        self.purge(reference, ref=ref)


class LagProbe(BaseTrigger):
    """Measures its own loop's lag: ``samples`` sleeps of ``interval`` seconds, each
    woken late by how much; fires once with the lateness in milliseconds."""

    def __init__(self, samples: int = 200, interval: float = 0.02):
        self.samples, self.interval = samples, interval

    def serialize(self):
        return "_state_backends.LagProbe", {"samples": self.samples, "interval": self.interval}

    async def run(self):
        late = []
        for _ in range(self.samples):
            started = time.perf_counter()
            await asyncio.sleep(self.interval)
            late.append((time.perf_counter() - started - self.interval) * 1000)
        yield TriggerEvent({"late_ms": late})
