"""Dags, triggers and helpers for the deferral and triggerer tests.

The scheduler runs in the test process; the triggerer is a real child (role
``triggerer``) with its trigger runner under it, both under the test's start method.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from spawnflow.bootstrap import launcher, orm
from spawnflow.models.run import TaskInstance
from spawnflow.models.triggers import Trigger
from tests.scheduler import harness

#: A module of the Dags folder: the trigger runner imports its triggers from there.
HELPERS = '''
import asyncio, threading, time
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname
from spawnflow import BaseTrigger, TriggerEvent
from spawnflow.xcoms.objectstorage import ObjectStorageStateBackend


class SleepyTrigger(BaseTrigger):
    """Blocks its loop with time.sleep (a bug on purpose), then fires."""

    def __init__(self, seconds):
        self.seconds = seconds

    def serialize(self):
        return "deferral_helpers.SleepyTrigger", {"seconds": self.seconds}

    async def run(self):
        time.sleep(self.seconds)
        yield TriggerEvent("slept")


class PoliteTrigger(BaseTrigger):
    """Waits without blocking, then fires."""

    def __init__(self, seconds):
        self.seconds = seconds

    def serialize(self):
        return "deferral_helpers.PoliteTrigger", {"seconds": self.seconds}

    async def run(self):
        await asyncio.sleep(self.seconds)
        yield TriggerEvent("waited")


class ThreadRecordingBackend(ObjectStorageStateBackend):
    """Object storage that notes the thread each hook runs in, beside the objects."""

    def _note(self, hook):
        folder = Path(url2pathname(urlparse(self.objects.base).path))
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "threads.txt", "a") as out:
            out.write(f"{hook} {threading.get_ident()}\\n")

    def serialize(self, text, *, ref):
        self._note("serialize")
        return super().serialize(text, ref=ref)

    def deserialize(self, data, *, ref):
        self._note("deserialize")
        return super().deserialize(data, ref=ref)

    def store(self, data, *, ref):
        self._note("store")
        return super().store(data, ref=ref)

    def load(self, reference, *, ref):
        self._note("load")
        return super().load(reference, ref=ref)

    def purge(self, reference, *, ref):
        self._note("purge")
        super().purge(reference, ref=ref)


class FailingTrigger(BaseTrigger):
    def serialize(self):
        return "deferral_helpers.FailingTrigger", {}

    async def run(self):
        raise RuntimeError("the trigger broke on purpose")
        yield
'''

DAGS = """
import datetime as dt, os
from pathlib import Path
from spawnflow import (Asset, AssetWatcher, Dag, FileSensor, FileTrigger, TaskDeferred,
                       get_current_context, task)
from deferral_helpers import FailingTrigger, SleepyTrigger

GATES, MARKS = Path({gates!r}), Path({marks!r})


def mark(name, text=""):
    with open(MARKS / name, "a") as f:
        f.write(f"{{os.getpid()}} {{text}}\\n")


with Dag("waits_for_a_gate"):
    @task
    def waits():
        mark("waits-started")
        raise TaskDeferred(trigger=FileTrigger(str(GATES / "open"), poll_interval=0.1),
                           method_name="resume_waits", kwargs={{"note": "kept"}})

    waits()


def resume_waits(event, note, context):
    mark("waits-resumed", context["try_number"])
    return {{"path": Path(event["path"]).name, "note": note}}


with Dag("opens_the_gate"):
    @task
    def opens():
        (GATES / "open").write_text("")

    opens()


with Dag("times_out"):
    @task(retries=0)
    def never():
        raise TaskDeferred(trigger=FileTrigger(str(GATES / "never"), poll_interval=0.1),
                           method_name="resume_never", timeout=1)

    never()


with Dag("trigger_fails"):
    @task(retries=0)
    def broken():
        raise TaskDeferred(trigger=FailingTrigger(), method_name="resume_never")

    broken()


with Dag("blocks_the_loop"):
    @task
    def sleepy():
        raise TaskDeferred(trigger=SleepyTrigger(0.5), method_name="resume_sleepy")

    sleepy()


def resume_sleepy(event):
    return event


with Dag("remembers_across_tries"):
    @task(retries=1, retry_delay=0)
    def counts(context):
        store = context["task_state"]
        seen = store.get("tries", default=[]) + [context["try_number"]]
        store.set("tries", seen)
        if context["try_number"] == 1:
            raise RuntimeError("the first try fails on purpose")
        return seen

    counts()


with Dag("async_state"):
    @task
    async def uses_state(context):
        import threading, time
        store = context["task_state"]
        await store.aset("k", {{"v": 1}})
        await store.aset("k", {{"v": 2}})  # the first object is purged
        value = await store.aget("k")
        time.sleep(0.5)  # blocks its own loop: the watchdog says so in the try's log
        return {{"value": value, "loop_thread": threading.get_ident()}}

    uses_state()


with Dag("senses_a_file"):
    FileSensor("sensor", filepath=str(GATES / "sensed"), poke_interval=0.1, deferrable=True)


WATCHED = Asset("file://watched", watchers=[
    AssetWatcher("drops", FileTrigger(str(GATES / "drops" / "*.csv"), poll_interval=0.1)),
])

with Dag("consumes_the_drops", schedule=WATCHED):
    @task
    def consume(context):
        events = context["triggering_asset_events"]["file://watched"]
        mark("consumed", json.dumps([Path(e["extra"]["path"]).name for e in events]))

    consume()
"""


def write_dags(folder: Path, gates: Path, marks: Path, watchers: bool = True) -> None:
    """The Dags above in ``folder``; without ``watchers``, none with an asset watcher
    (whose trigger runs as long as its Dag is there)."""
    for path in (folder, gates, gates / "drops", marks):
        path.mkdir(parents=True, exist_ok=True)
    (folder / "deferral_helpers.py").write_text(HELPERS)
    (folder / ".spawnflowignore").write_text("deferral_helpers.py\n")
    assert DAGS.count("\nWATCHED = ") == 1  # the watcher's Dag comes last, from there on
    dags = DAGS if watchers else DAGS.split("\nWATCHED = ")[0]
    (folder / "deferring.py").write_text(
        "import json\n" + dags.format(gates=str(gates), marks=str(marks))
    )


def start_triggerer(settings, **kwargs) -> launcher.Child:
    """A triggerer child (role ``triggerer``), as ``standalone`` starts one."""
    spec = launcher.ChildSpec("triggerer", "spawnflow.processors.triggerer.job:run", kwargs,
                              settings=settings, warm_stop_group=False)  # fmt: skip
    child = launcher.launch(spec)
    child.wait_ready()
    return child


def marks_of(marks: Path, name: str) -> list[str]:
    path = marks / name
    return path.read_text().splitlines() if path.exists() else []


def task_instance(run_id: int, task_id: str) -> TaskInstance:
    return harness.task_instances(run_id)[task_id]


def trigger_rows(watchers: bool = False) -> list[Trigger]:
    """The tasks' trigger rows (the asset watchers' with ``watchers``)."""
    with orm.session_scope(write=False) as session:
        query = select(Trigger).order_by(Trigger.id)
        found = Trigger.asset_id.is_not(None) if watchers else Trigger.asset_id.is_(None)
        return list(session.scalars(query.where(found)))


def wait_for(condition, what: str, timeout: float = 120.0, poll: float = 0.05) -> None:
    """Wait until ``condition()`` holds; fail the test naming ``what`` past ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout:g} seconds")
        time.sleep(poll)


def log_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
