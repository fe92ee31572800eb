"""Sensors: tasks that wait for something, holding a worker slot or, deferred, none.

A sensor checks (:meth:`BaseSensor.poke`) and succeeds once the check holds. Run as is,
it checks every ``poke_interval`` seconds in its task process; with
``deferrable=True`` it checks once, then hands the waiting to a trigger on the
triggerer and frees its worker until the trigger fires::

    FileSensor("wait_for_orders", filepath="s3://shop/in/*.csv", deferrable=True)
    DateTimeSensorAsync("at_six", target_time=dt.datetime(2026, 12, 2, 6, tzinfo=dt.UTC))

Either way, a sensor still waiting after ``timeout`` seconds fails its try.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from spawnflow.sdk.tasks import Task
from spawnflow.sdk.triggers import DateTimeTrigger, FileTrigger, TaskDeferred, matching_files


class SensorTimeout(Exception):
    """A sensor waited ``timeout`` seconds and its condition still did not hold."""


class BaseSensor(Task):
    """Base class of sensors: subclasses implement :meth:`poke`, and for
    ``deferrable=True`` :meth:`trigger`.

    Args:
        poke_interval: seconds between two checks (and the trigger's polls).
        timeout: seconds after which a sensor still waiting fails its try (a week).
        deferrable: wait on the triggerer instead of in a worker slot.
    """

    kind = "sensor"

    def __init__(self, task_id: str, *, poke_interval: float = 60.0,
                 timeout: float = 7 * 24 * 3600.0, deferrable: bool = False,
                 **kwargs: Any):  # fmt: skip
        super().__init__(task_id, **kwargs)
        for name, value in (("poke_interval", poke_interval), ("timeout", timeout)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise self.dag.definition_error(
                    f"{name} {value!r} must be a positive number of seconds", task_id
                )
        self.poke_interval, self.timeout = float(poke_interval), float(timeout)
        self.deferrable = bool(deferrable)

    def poke(self, context: dict[str, Any]) -> bool:
        """Whether the condition holds now."""
        raise NotImplementedError(f"{type(self).__name__} does not implement poke()")

    def trigger(self) -> Any:
        """The trigger that waits for the condition on the triggerer (``deferrable``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot defer: it has no trigger()")

    def execute(self, context: dict[str, Any]) -> Any:
        if self.poke(context):
            return None
        if self.deferrable:
            raise TaskDeferred(trigger=self.trigger(), method_name="execute_complete",
                               timeout=self.timeout)  # fmt: skip
        ends = time.monotonic() + self.timeout
        while time.monotonic() < ends:
            time.sleep(min(self.poke_interval, max(0.0, ends - time.monotonic())))
            if self.poke(context):
                return None
        raise SensorTimeout(f"{self.task_id} still waited after {self.timeout:g} seconds")

    def execute_complete(self, event: Any = None, context: dict[str, Any] | None = None) -> Any:
        """Where a deferred sensor resumes: its trigger fired, so the condition held."""
        return None

    def arguments(self) -> dict[str, Any]:
        return {"poke_interval": self.poke_interval, "timeout": self.timeout,
                "deferrable": self.deferrable, "sensor": type(self).__qualname__}  # fmt: skip


class FileSensor(BaseSensor):
    """Succeeds once a file matches ``filepath`` (a path or fsspec URL; glob patterns
    allowed). Deferred, it waits on a :class:`~spawnflow.sdk.triggers.FileTrigger`."""

    def __init__(self, task_id: str, *, filepath: str, poke_interval: float = 30.0,
                 **kwargs: Any):  # fmt: skip
        super().__init__(task_id, poke_interval=poke_interval, **kwargs)
        if not isinstance(filepath, str) or not filepath:
            raise self.dag.definition_error(f"filepath {filepath!r} must be a path", task_id)
        self.filepath = filepath

    def poke(self, context: dict[str, Any]) -> bool:
        return bool(matching_files(self.filepath))

    def trigger(self) -> FileTrigger:
        return FileTrigger(self.filepath, poll_interval=self.poke_interval)

    def arguments(self) -> dict[str, Any]:
        return {**super().arguments(), "filepath": self.filepath}


class DateTimeSensorAsync(BaseSensor):
    """Succeeds at ``target_time`` (a datetime, naive meaning UTC, or its ISO text),
    waiting on the triggerer (always deferrable)."""

    def __init__(self, task_id: str, *, target_time: dt.datetime | str, **kwargs: Any):
        kwargs["deferrable"] = True
        super().__init__(task_id, **kwargs)
        try:
            self.target = DateTimeTrigger(target_time).moment
        except (TypeError, ValueError) as error:
            raise self.dag.definition_error(f"target_time: {error}", task_id) from None

    def poke(self, context: dict[str, Any]) -> bool:
        return dt.datetime.now(dt.UTC) >= self.target

    def trigger(self) -> DateTimeTrigger:
        return DateTimeTrigger(self.target)

    def arguments(self) -> dict[str, Any]:
        return {**super().arguments(), "target_time": self.target.isoformat()}
