"""A watchdog for asyncio event loops: a stall past a threshold is logged and counted,
naming the coroutine that held the loop.

Every coroutine the watchdog wraps (each trigger on the triggerer, every asyncio task
of an ``async def`` task, through a task factory) has each of its steps timed: the step
in progress is known by name at any moment. Two observers use that:

* a sampler on the loop (every ``interval`` seconds, 0.1 by default) reports each step
  that ran longer than ``threshold``, and a late wake-up that no step explains (a plain
  callback blocked the loop);
* a thread reports a stall that lasts (past five thresholds, and a second at least)
  while it lasts, naming the step in progress: a call that never returns (a hung
  native call) is reported too, though the loop never wakes.

A stall is reported once: one WARNING line and one increment of the metric given
(``triggers.blocked_main_thread``, ``tasks.blocked_main_thread``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from spawnflow.bootstrap import logs, metrics

Report = Callable[[float, list[str]], None]


class _Step:
    """The step of a wrapped coroutine that runs now (``outer``: the step of a wrapped
    coroutine that awaits this one directly, if any)."""

    __slots__ = ("name", "outer", "reported", "started")

    def __init__(self, name: str, outer: _Step | None):
        self.name, self.outer = name, outer
        self.started, self.reported = time.perf_counter(), False


class LoopWatchdog:
    """Watches one event loop; :meth:`install` from inside it, :meth:`close` at the end.

    Args:
        threshold: a stall longer than this (seconds) is reported.
        metric: the counter incremented once per stall.
        on_stall: called with (seconds, culprit names) for each stall, after the metric;
            it logs. Called from the loop's thread or from the watchdog's.
        interval: how often the sampler and the thread look.
    """

    def __init__(self, threshold: float, *, metric: str, on_stall: Report,
                 interval: float = 0.1):  # fmt: skip
        self.threshold, self.metric, self.on_stall = threshold, metric, on_stall
        self.interval = interval
        #: How long a stall lasts before the thread reports it without waiting for its end.
        self.hang_after = max(1.0, 5 * threshold)
        #: The wrapped step running now (on the loop's thread), or None.
        self.current: _Step | None = None
        self._slow: list[tuple[str, float]] = []
        self._tick = time.perf_counter()
        self._thread_reported_tick: float | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self.stalls = 0

    # -- wrapping -----------------------------------------------------------------------

    def timed(self, coro: Coroutine[Any, Any, Any], name: str) -> Coroutine[Any, Any, Any]:
        """``coro``, with each of its steps timed under ``name``."""
        return _Timed(coro, name, self)

    def task_factory(self, name_of: Callable[[Coroutine[Any, Any, Any]], str]):
        """A loop task factory that wraps every task's coroutine (``loop.set_task_factory``)."""

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task:
            if not isinstance(coro, _Timed):
                coro = self.timed(coro, name_of(coro))
            return asyncio.Task(coro, loop=loop, **kwargs)

        return factory

    def _step_started(self, name: str) -> _Step:
        step = self.current = _Step(name, self.current)
        return step

    def _step_ended(self, step: _Step) -> None:
        took = time.perf_counter() - step.started
        self.current = step.outer
        if took <= self.threshold:
            return
        with self._lock:  # the thread may be reporting this very step
            if step.reported:
                return
            step.reported = True
            # The innermost step that held the loop is the culprit, not those around it.
            outer = step.outer
            while outer is not None:
                outer.reported, outer = True, outer.outer
            self._slow.append((step.name, took))

    # -- observing ------------------------------------------------------------------------

    def install(self) -> None:
        """Start the sampler on the running loop and the thread beside it."""
        self._loop = asyncio.get_running_loop()
        self._tick = time.perf_counter()
        self._handle = self._loop.call_later(self.interval, self._sample)
        threading.Thread(target=self._watch, name="loop-watchdog", daemon=True).start()

    def close(self) -> None:
        """Stop watching; steps that held the loop since the last look are reported now
        (a coroutine that blocked in its last step, say)."""
        self._closed.set()
        if self._handle is not None:
            self._handle.cancel()
        with self._lock:
            slow, self._slow = self._slow, []
        for name, took in slow:
            self._report(took, [name])

    def _sample(self) -> None:
        now = time.perf_counter()
        late = now - self._tick - self.interval
        with self._lock:
            slow, self._slow = self._slow, []
            seen_by_thread = self._thread_reported_tick == self._tick
            self._tick = now
        for name, took in slow:
            self._report(took, [name])
        if not slow and late > self.threshold and not seen_by_thread:
            self._report(late, [])
        if not self._closed.is_set() and self._loop is not None:
            self._handle = self._loop.call_later(self.interval, self._sample)

    def _watch(self) -> None:
        while not self._closed.wait(self.interval):
            now = time.perf_counter()
            step = self.current
            with self._lock:
                tick = self._tick
                stalled = now - tick - self.interval > self.hang_after
                if not stalled or self._thread_reported_tick == tick:
                    continue
                if step is not None and now - step.started <= self.hang_after:
                    continue  # the stall began before this step: the sampler will say
                self._thread_reported_tick = tick
                held: _Step | None = step
                while held is not None:  # it and the steps around it: reported now
                    held.reported, held = True, held.outer
            self._report(now - (step.started if step else tick + self.interval),
                         [step.name] if step else [])  # fmt: skip

    def _report(self, seconds: float, culprits: list[str]) -> None:
        self.stalls += 1
        try:
            metrics.incr(self.metric)
            self.on_stall(seconds, culprits)
        except Exception:  # noqa: BLE001 - the watchdog outlives a sink that fails
            logs.get_logger("spawnflow.loopwatch").exception("reporting a stall failed")


class _Timed(Coroutine[Any, Any, Any]):
    """A coroutine that runs another and times each of its steps."""

    __slots__ = ("_inner", "_name", "_watchdog")

    def __init__(self, inner: Coroutine[Any, Any, Any], name: str, watchdog: LoopWatchdog):
        self._inner, self._name, self._watchdog = inner, name, watchdog

    def send(self, value: Any) -> Any:
        step = self._watchdog._step_started(self._name)
        try:
            return self._inner.send(value)
        finally:
            self._watchdog._step_ended(step)

    def throw(self, *args: Any) -> Any:
        step = self._watchdog._step_started(self._name)
        try:
            return self._inner.throw(*args)
        finally:
            self._watchdog._step_ended(step)

    def close(self) -> None:
        self._inner.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        # Awaited directly (not as a task): drive the coroutine here, step by timed step.
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                yielded = self.throw(error) if error is not None else self.send(value)
            except StopIteration as stop:
                return stop.value
            try:
                value, error = (yield yielded), None
            except BaseException as caught:  # noqa: BLE001 - handed on to the coroutine
                value, error = None, caught
