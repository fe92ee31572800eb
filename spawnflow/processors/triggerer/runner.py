"""The trigger runner (role ``trigger-runner``): every trigger on one asyncio loop.

Started by the triggerer, which owns the database; this process never opens it and
never imports SQLAlchemy. It runs what the triggerer tells it (:class:`RunTrigger`,
:class:`CancelTrigger`) and says what happened (:class:`TriggerFired`,
:class:`TriggerEnded`). A task's trigger ends at its first event; an asset watcher's
runs until it is cancelled. Asset watchers' state stores and Variable or Connection
lookups are requests to the triggerer, made from worker threads.

Nothing here blocks the loop: a thread reads the channel and hands each message to
the loop, another writes, and importing a trigger's module happens in a worker thread.
A watchdog (:mod:`spawnflow.bootstrap.loopwatch`) logs and counts every stall of the
loop past ``[triggerer] blocked_main_thread_warning_threshold``, naming the triggers
that held it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import queue
import sys
import threading
import uuid
from typing import Any

from spawnflow.bootstrap import lifecycle, logs, wire
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.loopwatch import LoopWatchdog
from spawnflow.comms import state as state_messages
from spawnflow.comms.triggers import CancelTrigger, RunTrigger, TriggerEnded, TriggerFired
from spawnflow.sdk import runtime, state, xcom
from spawnflow.sdk.partitions import MAX_PARTITION_KEY_LENGTH as MAX_KEY
from spawnflow.sdk.triggers import TriggerEvent, load_trigger

log = logs.get_logger("spawnflow.trigger_runner")

#: The trigger whose code runs in the current asyncio task (tasks it starts inherit it).
_running: contextvars.ContextVar[str] = contextvars.ContextVar("trigger", default="")


def run(channel: wire.Channel) -> None:
    """Entry point of the ``trigger-runner`` child."""
    lifecycle.defer_warm_stop()  # cancel the triggers and leave, rather than unwind the loop
    settings = settings_module.current()
    folder = str(settings.core.dags_folder)
    if folder not in sys.path:  # trigger classes may live in modules of the Dags folder
        sys.path.append(folder)
    runtime.install(channel, {})  # Variable.get and Connection.get ask the triggerer
    asyncio.run(TriggerRunner(channel, settings).serve())


class TriggerRunner:
    """Runs triggers until its channel closes or it is asked to stop."""

    def __init__(self, channel: wire.Channel, settings: settings_module.Settings):
        self.channel, self.settings = channel, settings
        self.tasks: dict[int, asyncio.Task] = {}
        self._outbox: queue.SimpleQueue[wire.Message | None] = queue.SimpleQueue()
        self._closed: asyncio.Event | None = None
        threshold = settings.triggerer.blocked_main_thread_warning_threshold
        self.watchdog = LoopWatchdog(threshold, metric="triggers.blocked_main_thread",
                                     on_stall=self._stalled)  # fmt: skip

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        self._closed = asyncio.Event()
        loop.set_task_factory(self.watchdog.task_factory(_name_of_task))
        self.watchdog.install()
        threading.Thread(target=self._read, args=(loop,), name="trigger-reader",
                         daemon=True).start()  # fmt: skip
        writer = threading.Thread(target=self._write, name="trigger-writer", daemon=True)
        writer.start()
        log.info("trigger runner ready", threshold=self.watchdog.threshold)
        try:
            while not self._closed.is_set() and not lifecycle.stop_requested.is_set():
                try:
                    await asyncio.wait_for(self._closed.wait(), timeout=0.1)
                except TimeoutError:
                    pass
        finally:
            for task in self.tasks.values():
                task.cancel()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
            self.watchdog.close()
            self._outbox.put(None)
            writer.join(timeout=5.0)

    # -- the channel, in threads of their own ------------------------------------------------

    def _read(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            try:
                message = self.channel.recv()
            except (EOFError, OSError):
                loop.call_soon_threadsafe(self._close)
                return
            except wire.ProtocolError as error:
                log.error("unreadable message from the triggerer", error=str(error))
                continue
            loop.call_soon_threadsafe(self._on_message, message)

    def _write(self) -> None:
        while (message := self._outbox.get()) is not None:
            try:
                self.channel.send(message)
            except (OSError, ValueError):
                return  # the triggerer is gone: the reader sees it too

    def send(self, message: wire.Message) -> None:
        self._outbox.put(message)

    def _close(self) -> None:
        assert self._closed is not None  # serve() made it
        self._closed.set()

    # -- on the loop ----------------------------------------------------------------------

    def _on_message(self, message: wire.Message) -> None:
        if isinstance(message, RunTrigger):
            old = self.tasks.pop(message.trigger_id, None)
            if old is not None:
                old.cancel()
            name = _trigger_name(message)
            token = _running.set(name)  # the task below, and what it starts, carry the name
            try:
                task = asyncio.get_running_loop().create_task(
                    self.watchdog.timed(self._run_trigger(message), name)
                )
            finally:
                _running.reset(token)
            self.tasks[message.trigger_id] = task
            task.add_done_callback(functools.partial(self._forget, message.trigger_id))
        elif isinstance(message, CancelTrigger):
            cancelled = self.tasks.pop(message.trigger_id, None)
            if cancelled is not None:
                cancelled.cancel()
        else:
            log.warning("unexpected message from the triggerer", message=type(message).__name__)

    def _forget(self, trigger_id: int, task: asyncio.Task) -> None:
        if self.tasks.get(trigger_id) is task:  # not one that replaced it meanwhile
            del self.tasks[trigger_id]

    async def _run_trigger(self, spec: RunTrigger) -> None:
        events = 0
        try:
            # Importing the trigger's module may take a while (or block): not on the loop.
            kwargs = await asyncio.to_thread(xcom.decode, spec.kwargs)
            trigger = await asyncio.to_thread(load_trigger, spec.classpath, kwargs)
            if spec.asset_uri is not None:
                trigger.asset_state = self._asset_state(spec.asset_uri)
            log.info("trigger started", trigger_id=spec.trigger_id, trigger=spec.classpath,
                     owner=spec.owner)  # fmt: skip
            stream = trigger.run()
            try:
                async for event in stream:
                    fired = await asyncio.to_thread(_fired, spec, event)
                    if fired is None:
                        continue  # said why in the log
                    events += 1
                    self.send(fired)
                    log.info("trigger fired", trigger_id=spec.trigger_id, owner=spec.owner)
                    if spec.asset_uri is None:
                        break  # a task's trigger has done its work: the task resumes
            finally:
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await close()  # the trigger's own clean-up (its finally blocks) runs now
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.exception("trigger failed", trigger_id=spec.trigger_id, owner=spec.owner)
            self.send(TriggerEnded(trigger_id=spec.trigger_id,
                                   error=f"{type(error).__name__}: {error}"))  # fmt: skip
            return
        if spec.asset_uri is not None or events == 0:
            why = None if events else "it ended without an event"
            self.send(TriggerEnded(trigger_id=spec.trigger_id, error=why))

    def _asset_state(self, uri: str) -> state.StateStore:
        settings = self.settings
        return state.StateStore(state_messages.ASSET, (uri,), runtime.ask,
                                lambda: state.load_backend(settings))  # fmt: skip

    def _stalled(self, seconds: float, culprits: list[str]) -> None:
        named = culprits or ["something other than a trigger (a callback)"]
        log.warning("event loop blocked", seconds=round(seconds, 3),
                    threshold=self.watchdog.threshold, culprits=named)  # fmt: skip


def _fired(spec: RunTrigger, event: Any) -> TriggerFired | None:
    """The message for one event (in a worker thread: JSON of a large payload takes a
    while); None, logged, for an event the triggerer could not record."""
    where = f"an event of {spec.classpath}"
    try:
        if not isinstance(event, TriggerEvent):
            raise ValueError(f"{where} is a {type(event).__name__}, not a TriggerEvent")
        key = event.partition_key
        if key is not None and not (isinstance(key, str) and 1 <= len(key) <= MAX_KEY):
            raise ValueError(f"{where} has partition key {key!r}: not 1-{MAX_KEY} characters")
        state = {}
        if spec.asset_uri is not None:  # a task's trigger has no asset state to set
            state = {name: xcom.encode(value, subject=f"state {name!r} of {where}")
                     for name, value in event.state.items()}  # fmt: skip
        payload = xcom.encode(event.payload, subject=where)
    except (ValueError, TypeError) as error:
        log.error("trigger event dropped", trigger_id=spec.trigger_id, owner=spec.owner,
                  error=str(error))  # fmt: skip
        return None
    return TriggerFired(trigger_id=spec.trigger_id, payload=payload, event_id=uuid.uuid4().hex,
                        partition_key=key, state=state)  # fmt: skip


def _trigger_name(spec: RunTrigger) -> str:
    return f"trigger {spec.trigger_id} ({spec.classpath.rsplit('.', 1)[-1]}) for {spec.owner}"


def _name_of_task(coro: Any) -> str:
    """The name a stall blames on an asyncio task: the trigger that started it."""
    return _running.get() or f"runner ({getattr(coro, '__qualname__', type(coro).__name__)})"
