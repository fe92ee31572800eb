"""The one loop that services a parent's children.

A parent registers each child it launches with a :class:`Watch` and says what to do
when something happens: the child is ready, sends a message, writes output, exits,
misses a deadline, or fails to boot; timers run alongside (heartbeats). One turn of
:meth:`Watch.wait` waits on every channel, output pipe and sentinel at once with
``multiprocessing.connection.wait`` and dispatches what became ready, in a fixed order:
boot, messages, output, exits, deadlines, timers.

Budgets are kept apart. A child's boot has its own (``[core] child_boot_timeout``,
from launch to Ready): a spawned child's interpreter start and imports can take
seconds on a busy machine. A user's budget (a parse timeout, an execution timeout, a
call timeout) is a deadline the parent sets once the child is ready, typically from
``on_ready``, so a slow boot never eats it.

An exit is handled once the child's channel is drained (what it sent before it died
counts) and its captured output reached end of file, or ``output_grace`` seconds
passed (a process it left behind may hold the pipes open): then the child is reaped,
what it left in its process group killed, and ``on_exit`` called.

Callbacks run in the caller of :meth:`Watch.wait`; an exception they raise comes out
of it (a parent that must go on catches it in its callback). Another thread ends a
wait early through the watch's :class:`Waker` (work handed over in a queue).
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

from spawnflow.bootstrap import wire
from spawnflow.bootstrap.child import Child, ChildBootError, ExitStatus

#: How often a child whose sentinel stays silent is checked for having exited (a
#: process it forked may hold the sentinel's pipe open after it exited).
LIVENESS_INTERVAL = 0.25


class Watched:
    """A child under watch, with what to do about it; made by :meth:`Watch.add`."""

    def __init__(self, child: Child, *, boot_timeout: float,
                 on_ready: Callable[[Watched], None] | None,
                 on_message: Callable[[Watched, wire.Message], None] | None,
                 on_output: Callable[[Watched, str, bytes], None] | None,
                 on_exit: Callable[[Watched, ExitStatus], None] | None,
                 on_deadline: Callable[[Watched], None] | None,
                 on_boot_failure: Callable[[Watched, ChildBootError], None] | None,
                 on_unreadable: Callable[[Watched, Exception], None] | None,
                 output_grace: float):  # fmt: skip
        self.child = child
        self.on_ready, self.on_message, self.on_output = on_ready, on_message, on_output
        self.on_exit, self.on_deadline, self.on_boot_failure = on_exit, on_deadline, on_boot_failure
        self.on_unreadable = on_unreadable
        self.output_grace = output_grace
        self.boot_timeout = boot_timeout
        self.boot_deadline = time.monotonic() + boot_timeout
        #: When :attr:`on_deadline` runs (monotonic seconds), if set.
        self.deadline: float | None = None
        self.streams: dict[str, Any] = {}
        if child.stdout is not None:
            self.streams["stdout"] = child.stdout
        if child.stderr is not None:
            self.streams["stderr"] = child.stderr
        self.channel_open = True
        self.exited_at: float | None = None
        self.next_look = time.monotonic()
        #: When a child asked to stop warm (:meth:`Watch.stop`) is killed, if it is still there.
        self.kill_at: float | None = None
        self.done = False

    def __repr__(self) -> str:
        return f"<Watched {self.child!r}>"

    @property
    def ready(self) -> bool:
        return self.child.ready is not None

    @property
    def stopping(self) -> bool:
        """Asked to stop warm by :meth:`Watch.stop`, and not gone yet."""
        return self.kill_at is not None

    def set_deadline(self, seconds: float | None) -> None:
        """Call ``on_deadline`` ``seconds`` from now (None: no deadline)."""
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def objects(self) -> list[Any]:
        found = list(self.streams.values())
        if self.channel_open:
            found.append(self.child.channel.connection)
        if self.exited_at is None:
            found.append(self.child.sentinel)
        return found


class _Timer:
    def __init__(self, interval: float, callback: Callable[[], None]):
        self.interval, self.callback = interval, callback
        self.due = time.monotonic() + interval


class Waker:
    """Ends a :meth:`Watch.wait` from another thread: a pipe among what the wait waits
    on (a pipe, not a threading.Event, so that one ``multiprocessing.connection.wait``
    covers it and the children on every OS). At most one byte is pending, so a thread
    that wakes often never fills the pipe."""

    def __init__(self) -> None:
        self.reader, self._writer = multiprocessing.Pipe(duplex=False)
        self._lock = threading.Lock()
        self._pending = False

    def wake(self) -> None:
        with self._lock:
            if self._pending:
                return
            self._pending = True
        self._writer.send_bytes(b"!")

    def clear(self) -> None:
        """Drain the pipe (the waiting thread, once its wait returned)."""
        with self._lock:
            while self.reader.poll():
                self.reader.recv_bytes()
            self._pending = False

    def close(self) -> None:
        self.reader.close()
        self._writer.close()


class Watch:
    """The children of one parent and its timers, serviced by :meth:`wait`.

    Args:
        boot_timeout: seconds from launch to Ready; ``[core] child_boot_timeout`` of the
            children's settings if None.
        liveness_interval: how often a child whose sentinel is silent is checked.
    """

    def __init__(self, *, boot_timeout: float | None = None,
                 liveness_interval: float = LIVENESS_INTERVAL):  # fmt: skip
        self.boot_timeout = boot_timeout
        self.liveness_interval = liveness_interval
        self.watched: list[Watched] = []
        self._timers: list[_Timer] = []
        self._waker: Waker | None = None
        #: Whether the last :meth:`wait` was ended by :meth:`waker`'s ``wake``.
        self.woken = False

    def waker(self) -> Waker:
        """The watch's :class:`Waker` (made on first use)."""
        if self._waker is None:
            self._waker = Waker()
        return self._waker

    def add(
        self,
        child: Child,
        *,
        on_ready: Callable[[Watched], None] | None = None,
        on_message: Callable[[Watched, wire.Message], None] | None = None,
        on_output: Callable[[Watched, str, bytes], None] | None = None,
        on_exit: Callable[[Watched, ExitStatus], None] | None = None,
        on_deadline: Callable[[Watched], None] | None = None,
        on_boot_failure: Callable[[Watched, ChildBootError], None] | None = None,
        on_unreadable: Callable[[Watched, Exception], None] | None = None,
        output_grace: float = 2.0,
    ) -> Watched:
        """Watch ``child`` (just launched, or already ready).

        Without ``on_boot_failure`` a failed boot raises its ChildBootError out of
        :meth:`wait`. Without ``on_deadline`` a passed deadline stops the child
        (:meth:`stop`: warm, then cold after its grace period, without holding up the
        loop). A
        message that cannot be decoded goes to ``on_unreadable``; without it the child,
        whose channel can no longer be trusted, is stopped (``on_exit`` follows).
        """
        boot_timeout = self.boot_timeout
        if boot_timeout is None:
            boot_timeout = child.boot_timeout
        watched = Watched(
            child, boot_timeout=boot_timeout, on_ready=on_ready, on_message=on_message,
            on_output=on_output, on_exit=on_exit, on_deadline=on_deadline,
            on_boot_failure=on_boot_failure, on_unreadable=on_unreadable,
            output_grace=output_grace,
        )  # fmt: skip
        self.watched.append(watched)
        return watched

    def forget(self, watched: Watched) -> None:
        """Stop watching (the caller now owns the child: stop or reap it)."""
        watched.done = True
        if watched in self.watched:
            self.watched.remove(watched)

    def stop(self, watched: Watched, grace: float | None = None) -> None:
        """Stop ``watched`` warm now and kill its tree ``grace`` seconds later (the
        child's ``[core] stop_grace_period`` if None) if it is still there, without
        holding up the loop: heartbeats and other children go on meanwhile. Its exit
        reaches ``on_exit`` as any other; a second call changes nothing."""
        if watched.stopping or watched.done:
            return
        if grace is None:
            settings = watched.child.spec.settings
            grace = settings.core.stop_grace_period if settings is not None else 10.0
        watched.kill_at = time.monotonic() + grace
        if grace > 0:
            watched.child.request_warm_stop()

    def every(self, interval: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` every ``interval`` seconds, from :meth:`wait`."""
        self._timers.append(_Timer(interval, callback))

    def children(self) -> list[Child]:
        return [w.child for w in self.watched]

    def until(self, condition: Callable[[], bool], timeout: float | None = None,
              poll: float | None = None) -> bool:  # fmt: skip
        """Service the children until ``condition()`` holds (True) or ``timeout`` passes.

        ``condition`` is checked after every turn; give ``poll`` (seconds) when it can
        turn true without anything the watch sees happening (a file appearing, say).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not condition():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            if poll is not None:
                left = poll if left is None else min(left, poll)
            self.wait(left)
        return True

    # -- one turn -------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> None:
        """Wait for something to happen (at most ``timeout`` seconds), then handle it."""
        from multiprocessing.connection import wait

        self._sweep_reaped()
        now = time.monotonic()
        objects = [obj for watched in self.watched for obj in watched.objects()]
        if self._waker is not None:
            objects.append(self._waker.reader)
        wake = self._next_wake(now)
        if timeout is not None:
            wake = now + timeout if wake is None else min(wake, now + timeout)
        ready: set = set()
        if objects:
            ready = set(wait(objects, None if wake is None else max(0.0, wake - now)))
        elif wake is not None:
            # Only timers: sleep (multiprocessing's wait spins on an empty list on Windows).
            time.sleep(max(0.0, wake - now))
        # Nothing to wait for and no end to the wait: return rather than block forever.
        waker = self._waker
        self.woken = waker is not None and waker.reader in ready
        if waker is not None and self.woken:
            waker.clear()  # before the caller looks at what it was woken for
        for watched in list(self.watched):
            if not watched.done:
                self._service(watched, ready)
        self._sweep_reaped()
        self._run_timers()
        self._sweep_reaped()

    def _sweep_reaped(self) -> None:
        """Children a callback stopped or joined itself: finish them here, once."""
        for watched in list(self.watched):
            status = watched.child.exit_status
            if status is not None:
                self.forget(watched)
                if watched.on_exit is not None:
                    watched.on_exit(watched, status)

    def _next_wake(self, now: float) -> float | None:
        times = [t.due for t in self._timers]
        for watched in self.watched:
            if not watched.ready:
                times.append(watched.boot_deadline)
            if watched.exited_at is not None:
                times.append(watched.exited_at + watched.output_grace)
                continue  # an exited child's deadlines no longer count
            if watched.deadline is not None:
                times.append(watched.deadline)
            if watched.kill_at is not None:
                times.append(watched.kill_at)
        # No wake-up for liveness checks of their own: a look costs a /proc read, and a
        # silent sentinel is rare (a process the child forked holds it); the next wake-up
        # of any kind looks, at most every liveness_interval.
        return min(times, default=None)

    def _service(self, watched: Watched, ready: set) -> None:
        child = watched.child
        if child.exit_status is not None:
            return  # reaped by a callback this turn: _sweep_reaped finishes it
        now = time.monotonic()
        if watched.exited_at is None and (child.sentinel in ready or now >= watched.next_look):
            watched.next_look = now + self.liveness_interval
            if not child.is_alive():
                watched.exited_at = now
        if watched.kill_at is not None and now >= watched.kill_at and watched.exited_at is None:
            self._reap(watched, kill=True)  # asked to stop warm, booted or not, and still there
            return
        if not watched.ready:
            self._boot(watched, ready, now)
            if not watched.ready:
                return
        if watched.channel_open and (
            child.channel.connection in ready or watched.exited_at is not None
        ):
            self._read_messages(watched)
            if watched.done:
                return
        for name, stream in list(watched.streams.items()):
            if stream in ready and child.exit_status is None:
                self._read_output(watched, name, stream)
        if child.exit_status is not None:
            return
        if watched.exited_at is not None:
            if not watched.streams or now >= watched.exited_at + watched.output_grace:
                self._reap(watched)
            return
        if watched.deadline is not None and now >= watched.deadline and not watched.done:
            # What arrived while earlier callbacks of this turn ran counts first.
            if watched.channel_open and child.channel.poll():
                self._read_messages(watched)
                if watched.done or child.exit_status is not None or watched.deadline is None:
                    return
                if time.monotonic() < watched.deadline:
                    return  # a message moved the deadline on
            watched.deadline = None
            if watched.on_deadline is not None:
                watched.on_deadline(watched)
            else:
                self.stop(watched)

    def _boot(self, watched: Watched, ready: set, now: float) -> None:
        child = watched.child
        if child.channel.connection in ready or watched.exited_at is not None:
            try:
                child.accept_boot_message()
            except ChildBootError as failure:
                if watched.stopping and child.exit_status is not None:
                    # Asked to stop while it booted, and it did: an exit, not a failure.
                    self.forget(watched)
                    if watched.on_exit is not None:
                        watched.on_exit(watched, child.exit_status)
                    return
                self._boot_failed(watched, failure)
                return
            if watched.on_ready is not None:
                watched.on_ready(watched)
        elif now >= watched.boot_deadline and not child.channel.connection.poll():
            error = child.boot_too_slow(time.perf_counter() - child.launched_at,
                                        watched.boot_timeout)  # fmt: skip
            child.stop(grace=0)
            self._boot_failed(watched, error)

    def _boot_failed(self, watched: Watched, error: ChildBootError) -> None:
        self.forget(watched)
        if watched.child.exit_status is None:
            watched.child.stop(grace=0)
        if watched.on_boot_failure is None:
            raise error
        watched.on_boot_failure(watched, error)

    def _read_messages(self, watched: Watched) -> None:
        channel = watched.child.channel
        while (
            not watched.done
            and watched.channel_open
            and watched.child.exit_status is None
            and channel.poll()
        ):
            try:
                message = channel.recv()
            except (EOFError, OSError):
                watched.channel_open = False
                return
            except wire.ProtocolError as error:
                watched.channel_open = False
                if watched.on_unreadable is not None:
                    watched.on_unreadable(watched, error)
                else:
                    watched.child.stop(grace=0)
                return
            if watched.on_message is not None:
                watched.on_message(watched, message)
        if watched.exited_at is not None:
            watched.channel_open = False  # drained: what it sent before it died is in

    def _read_output(self, watched: Watched, name: str, stream: Any) -> None:
        from spawnflow.bootstrap import platform as platforms

        data = platforms.current().read_output(stream)
        if not data:
            del watched.streams[name]
        elif watched.on_output is not None:
            watched.on_output(watched, name, data)

    def _reap(self, watched: Watched, kill: bool = False) -> None:
        self.forget(watched)
        child = watched.child
        status = child.stop(grace=0) if kill else child.join(timeout=30)
        if status is None:  # reported gone, yet not reapable within 30 s: take it down
            status = child.stop(grace=0)
        if watched.on_exit is not None:
            watched.on_exit(watched, status)

    def _run_timers(self) -> None:
        now = time.monotonic()
        for timer in list(self._timers):
            if now >= timer.due:
                timer.due = now + timer.interval
                timer.callback()
