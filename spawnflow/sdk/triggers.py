"""Triggers: small pieces of async code that wait for something on the triggerer.

A task that has to wait for something outside — a time, a file, an API — *defers*: it
raises :class:`TaskDeferred` with a trigger, its worker slot is freed at once, and the
trigger runs on the triggerer's event loop beside thousands of others. When the trigger
yields its first :class:`TriggerEvent`, the task is queued again and resumes in a new
task process, at ``method_name``, with the event::

    from spawnflow import Dag, TaskDeferred, TimeDeltaTrigger, task

    @task
    def wait_then_report():
        raise TaskDeferred(trigger=TimeDeltaTrigger(dt.timedelta(minutes=5)),
                           method_name="report")

    def report(event, context):        # in the same Dag file, or a method of a task class
        return f"woken at {event['moment']}"

A trigger is rebuilt from :meth:`BaseTrigger.serialize`: an import path and keyword
arguments of plain JSON data. It runs in a process that never opens the database, and
must never block its event loop: blocking work goes to ``asyncio.to_thread`` (the
built-in :class:`FileTrigger` does so), and a watchdog names the trigger that blocks.

An :class:`AssetWatcher` runs a trigger for an asset instead of a task: every event it
yields becomes an event of the asset.
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from spawnflow.sdk.names import check_id

if TYPE_CHECKING:
    from spawnflow.sdk.state import StateStore


class TriggerEvent:
    """What a trigger yields when the thing it waits for happened.

    Args:
        payload: JSON-ready data (datetimes too); a resumed task gets it as ``event``,
            an asset watcher's event keeps it as its ``extra`` (a dict) or as
            ``{"payload": ...}``.
        partition_key: for an asset watcher, the partition the asset event is for.
        state: for an asset watcher, keys of the asset's state store to set together
            with the event, in one transaction: what the watcher remembers of what it
            reported (a file it saw) is never ahead of, nor behind, what was recorded.
    """

    __slots__ = ("partition_key", "payload", "state")

    def __init__(self, payload: Any = None, *, partition_key: str | None = None,
                 state: dict[str, Any] | None = None):  # fmt: skip
        self.payload, self.partition_key = payload, partition_key
        self.state = dict(state or {})

    def __repr__(self) -> str:
        return f"TriggerEvent({self.payload!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TriggerEvent):
            return NotImplemented
        return (self.payload, self.partition_key) == (other.payload, other.partition_key)


class BaseTrigger:
    """Base class of triggers.

    Subclasses implement :meth:`serialize` (how to build the trigger again, in another
    process) and :meth:`run`, an async generator that yields :class:`TriggerEvent`.
    For a task, the first event resumes it and the trigger is then cancelled; for an
    asset watcher, every event is an asset event.

    ``asset_state`` is the watched asset's state store while the trigger runs as an
    asset watcher (None for a task's trigger): it keeps small values across triggerer
    restarts, through its async accessors (``await self.asset_state.aget(key)``).
    """

    asset_state: StateStore | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """``("package.module.Class", keyword arguments)``: JSON data that rebuild it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement serialize()")

    def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait, then yield events; must never block the event loop."""
        raise NotImplementedError(f"{type(self).__name__} does not implement run()")

    def __repr__(self) -> str:
        classpath, kwargs = self.serialize()
        return f"<{classpath.rsplit('.', 1)[-1]} {kwargs}>"


class TaskDeferred(BaseException):  # as Airflow's: a task's `except Exception` lets it by
    """Raised by a running task to hand its waiting to a trigger and free its worker.

    Args:
        trigger: what to wait for.
        method_name: what runs when the trigger fires: a method of the task (for task
            classes such as sensors), or a function of that name in the module of the
            task's function. It is called with ``event`` (the event's payload), the
            ``kwargs`` given here, and ``context`` if it takes one; what it returns is the
            task's return value.
        kwargs: JSON data passed on to ``method_name``.
        timeout: how long the trigger may take (seconds or a timedelta); past it the
            try fails with a reason saying so (and is retried if it has retries left).
    """

    def __init__(self, *, trigger: BaseTrigger, method_name: str,
                 kwargs: dict[str, Any] | None = None,
                 timeout: dt.timedelta | float | None = None):  # fmt: skip
        if not isinstance(trigger, BaseTrigger):
            raise TypeError(f"TaskDeferred needs a trigger, not {type(trigger).__name__}")
        if not isinstance(method_name, str) or not method_name.isidentifier():
            raise ValueError(f"method_name {method_name!r} must name a function or method")
        super().__init__(f"deferred to {trigger!r}, resuming at {method_name}")
        self.trigger, self.method_name = trigger, method_name
        self.kwargs = dict(kwargs or {})
        if isinstance(timeout, dt.timedelta):
            timeout = timeout.total_seconds()
        if timeout is not None and (isinstance(timeout, bool) or timeout <= 0):
            raise ValueError(f"timeout {timeout!r} must be a positive number of seconds")
        self.timeout: float | None = None if timeout is None else float(timeout)


class AssetWatcher:
    """Runs ``trigger`` on the triggerer for as long as its asset is referenced by a Dag:
    every event the trigger yields becomes an event of the asset.

    Args:
        name: unique among the asset's watchers (letters, digits, ``_``, ``-``, ``.``).
        trigger: the trigger to run.
    """

    __slots__ = ("name", "trigger")

    def __init__(self, name: str, trigger: BaseTrigger):
        self.name = check_id(name, "asset watcher name")
        if not isinstance(trigger, BaseTrigger):
            raise TypeError(f"asset watcher {name!r} needs a trigger, not {trigger!r}")
        self.trigger = trigger

    def __repr__(self) -> str:
        return f"AssetWatcher({self.name!r}, {self.trigger!r})"


def load_trigger(classpath: str, kwargs: dict[str, Any]) -> BaseTrigger:
    """The trigger :meth:`BaseTrigger.serialize` described; ImportError or TypeError
    saying what is wrong."""
    module_name, _, name = classpath.rpartition(".")
    try:
        kind = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ImportError(f"cannot import trigger class {classpath!r}: {error}") from None
    if not (isinstance(kind, type) and issubclass(kind, BaseTrigger)):
        raise TypeError(f"{classpath!r} is not a trigger class")
    return kind(**kwargs)


def classpath_of(trigger: BaseTrigger) -> str:
    kind = type(trigger)
    return f"{kind.__module__}.{kind.__qualname__}"


# -- built-in triggers -----------------------------------------------------------------


def _aware(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


class DateTimeTrigger(BaseTrigger):
    """Fires once, at ``moment`` (a naive datetime is UTC); the payload is
    ``{"moment": moment}``."""

    def __init__(self, moment: dt.datetime | str):
        if isinstance(moment, str):
            moment = dt.datetime.fromisoformat(moment)
        if not isinstance(moment, dt.datetime):
            raise TypeError(f"DateTimeTrigger needs a datetime, not {moment!r}")
        self.moment = _aware(moment)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return classpath_of(self), {"moment": self.moment.isoformat()}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        import asyncio

        # Sleep in steps of at most an hour: a suspended laptop's clock jumps.
        while (left := (self.moment - dt.datetime.now(dt.UTC)).total_seconds()) > 0:
            await asyncio.sleep(min(left, 3600.0))
        yield TriggerEvent({"moment": self.moment.isoformat()})


class TimeDeltaTrigger(DateTimeTrigger):
    """Fires once, ``delta`` after it was created (the moment the task deferred)."""

    def __init__(self, delta: dt.timedelta | float | None = None, *,
                 moment: dt.datetime | str | None = None):  # fmt: skip
        if moment is None:
            if isinstance(delta, int | float) and not isinstance(delta, bool):
                delta = dt.timedelta(seconds=delta)
            if not isinstance(delta, dt.timedelta):
                raise TypeError(f"TimeDeltaTrigger needs a timedelta, not {delta!r}")
            moment = dt.datetime.now(dt.UTC) + delta
        super().__init__(moment)


class FileTrigger(BaseTrigger):
    """Fires when a file matching ``filepath`` exists: a path or an fsspec URL, glob
    patterns allowed (``s3://bucket/in/*.csv`` with s3fs). The payload is
    ``{"path": ...}``, one event per file.

    It looks every ``poll_interval`` seconds, in a thread (file systems block). As an
    asset watcher it yields each new file once, and remembers which (of those still
    there) in the asset's state store, with each event: a triggerer restart does not
    report a file again, and one it died before recording is reported again.
    """

    #: The state store key of the files an asset watcher has reported.
    SEEN_KEY = "file_trigger_seen"

    def __init__(self, filepath: str, poll_interval: float = 5.0):
        if not isinstance(filepath, str) or not filepath:
            raise ValueError(f"FileTrigger needs a path, not {filepath!r}")
        if isinstance(poll_interval, bool) or poll_interval <= 0:
            raise ValueError(f"poll_interval {poll_interval!r} must be a positive number")
        self.filepath, self.poll_interval = filepath, float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return classpath_of(self), {"filepath": self.filepath, "poll_interval": self.poll_interval}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        import asyncio

        seen: set[str] = set()
        store = self.asset_state
        if store is not None:
            seen = set(await store.aget(self.SEEN_KEY, default=[]))
        while True:
            found = await asyncio.to_thread(matching_files, self.filepath)
            seen &= set(found)  # a file removed and made again is news again
            for path in (path for path in found if path not in seen):
                seen.add(path)
                remembered = {self.SEEN_KEY: sorted(seen)} if store is not None else {}
                yield TriggerEvent({"path": path}, state=remembered)
            await asyncio.sleep(self.poll_interval)


def matching_files(filepath: str) -> list[str]:
    """The files that match ``filepath``, as the URL or path they were asked for."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(filepath)
    if any(ch in path for ch in "*?["):
        matches = sorted(p for p in fs.glob(path) if fs.isfile(p))
    else:
        matches = [path] if fs.isfile(path) else []
    if "://" not in filepath:
        return matches
    protocol = filepath.split("://", 1)[0]
    return [f"{protocol}://{p}" if "://" not in p else p for p in matches]
