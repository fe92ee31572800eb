"""How a launched child takes a warm stop, and the exit codes it reports.

By default a warm stop (SIGTERM, or the control pipe where there are no signals)
raises :class:`WarmStop` in the child's main thread: ``finally`` blocks and context
managers run, the launcher stops the child's own children, and the process exits
with :data:`EXIT_OK`. A target that wants to finish its current work first calls
:func:`defer_warm_stop` and watches :data:`stop_requested`; a second request then
stops it at once ("a second Ctrl-C means now"). A request that arrives while the
launcher is already stopping the child's children makes that stop cold.

Read ``lifecycle.stop_requested`` through the module: a fork child gets a fresh
event (the inherited one may belong to a parent that was stopping, and its lock
may have been held by another thread at the fork).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from spawnflow.bootstrap import platform as platforms

#: The target returned, or stopped warm when asked to.
EXIT_OK = 0
#: The target raised an exception (its traceback is in the role's log file).
EXIT_TARGET_FAILED = 1
#: The child could not boot: the spec, settings, logging or target import failed.
#: A supervisor should report this, not restart the child (gunicorn's WORKER_BOOT_ERROR).
EXIT_BOOT_FAILED = 3
#: The child's parent died and the child did not finish within its grace period.
EXIT_ORPHANED = 4

EXIT_MEANINGS = {
    EXIT_OK: "finished",
    EXIT_TARGET_FAILED: "target failed",
    EXIT_BOOT_FAILED: "boot failed",
    EXIT_ORPHANED: "parent died",
}


class StopRequest:
    """An event (``threading.Event``'s ``set``, ``is_set``, ``clear``, ``wait``) that a
    signal handler may set.

    ``threading.Event`` guards its flag with a plain lock, which its ``wait`` holds on
    its way in and out. A signal handled in the main thread while the main thread is
    there (a target looping on ``stop_requested.wait(0.5)`` is there every half second)
    would block on that lock forever in ``set``: the handler runs on the stack of the
    thread that holds it. Seen as a child that ignored a warm stop under load and was
    killed after its grace period. Here the lock is reentrant, so the handler takes it
    again.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.RLock())
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._changed:
            self._flag = True
            self._changed.notify_all()

    def clear(self) -> None:
        with self._changed:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the flag is set, once it is or ``timeout`` seconds passed."""
        with self._changed:
            if not self._flag:
                self._changed.wait(timeout)
            return self._flag


#: Set once a warm stop was requested.
stop_requested = StopRequest()
#: The signal that asked for the first stop, if a signal did.
_stop_signal: int | None = None
_deferred = False
_unwinding = False
_now = False
#: Interrupts of the main thread that the control pipe's watcher asked for.
_control_interrupts = 0
#: The ``sys.unraisablehook`` before :func:`install` put its own in front.
_previous_unraisablehook: Any = None


class WarmStop(SystemExit):
    """Raised in the main thread to unwind a child that was asked to stop."""

    def __init__(self) -> None:
        super().__init__(EXIT_OK)


def defer_warm_stop() -> None:
    """Let this process finish its work on a warm stop instead of unwinding at once.

    After calling this, the process must watch :data:`stop_requested` and return
    from its target when it is set.
    """
    global _deferred
    _deferred = True


def now_requested() -> bool:
    """Whether a second stop request asked for the children to be stopped cold."""
    return _now


def signal_exit_code() -> int | None:
    """The exit code a shell expects of a command a signal stopped: 128 + the signal
    (130 after Ctrl-C, 143 after SIGTERM); None if no signal asked this process to stop."""
    return None if _stop_signal is None else 128 + _stop_signal


def exiting() -> None:
    """This process's target ended and it is on its way out: from now on a stop request
    only makes the stop of its children cold; it never raises :class:`WarmStop`, which
    in ``atexit`` handlers and finalizers would only print a traceback."""
    global _unwinding
    _unwinding = True


@contextmanager
def unwinding() -> Iterator[None]:
    """While the launcher stops this process's children, stop requests do not unwind.

    It restores what was before, not False: a process stopping its children because a
    stop already unwinds it (or because its target returned) must not take a later
    request as a reason to raise :class:`WarmStop` again, in ``atexit`` handlers or
    weakref finalizers, where it is only printed as a traceback."""
    global _unwinding
    before, _unwinding = _unwinding, True
    try:
        yield
    finally:
        _unwinding = before


def install(
    control: Any = None,
    platform: platforms.Platform | None = None,
    *,
    child: bool = False,
    orphan_grace: float = 10.0,
    kill_with_parent: bool = False,
) -> None:
    """Install the warm-stop handling of this process.

    The handlers replace any a fork child inherited from its parent. A top-level
    command calls it with no arguments: SIGTERM and Ctrl-C ask for a warm stop, and
    Windows' Ctrl-Break for a cold one (like a second Ctrl-C). The launcher calls it in
    each ``child``: ``control`` is the read end of the control pipe the launcher gives
    children where warm stops or the parent's death cannot be signalled;
    ``orphan_grace`` is how long an orphan may take to stop before it exits hard, and
    ``kill_with_parent`` makes an orphan kill its own tree and leave at once.
    """
    import signal
    import sys

    platform = platform or platforms.current()
    if sys.unraisablehook is not _on_unraisable:
        global _previous_unraisablehook
        _previous_unraisablehook = sys.unraisablehook
        sys.unraisablehook = _on_unraisable
    signal.signal(signal.SIGTERM, _on_stop_request)
    if child and platform.console_broadcast:
        # A Windows console sends Ctrl-C to every process attached to it: only the
        # control pipe's own interrupts count here (see _stop_from_control).
        signal.signal(signal.SIGINT, _on_control_interrupt)
        platform.shield_from_console()
    else:
        # A POSIX child leads its own process group, so a terminal's Ctrl-C does not
        # reach it; a SIGINT sent to it on purpose means the same as SIGTERM.
        signal.signal(signal.SIGINT, _on_stop_request)
    ctrl_break = getattr(signal, "SIGBREAK", None)
    if not child and ctrl_break is not None:
        signal.signal(ctrl_break, _on_stop_now)
    if control is None:
        return
    watch = _ControlWatch(control, platform, orphan_grace, kill_with_parent)
    signum = platform.control_signal()
    if signum is not None:
        # The kernel tells us; no thread, so a child that forks does so single-threaded.
        signal.signal(signum, watch.on_signal)
        platform.signal_on_control_input(control)
        if control.poll(0):  # the parent died before we asked to be told
            watch.on_signal(signum, None)
    else:
        threading.Thread(target=watch.run, name="spawnflow-control", daemon=True).start()


def _on_stop_request(signum: int, frame: Any) -> None:
    global _now, _unwinding, _stop_signal
    first = not stop_requested.is_set()
    stop_requested.set()
    if first and signum > 0:
        _stop_signal = signum
    if not first:
        # A second request means now, however soon it follows the first: even before
        # a deferring process noticed the first and began its warm stop.
        _now = True
    if _unwinding:
        return
    if _deferred and first:
        return
    # From here on the process unwinds; a further request must not interrupt the
    # clean-up (stopping our own children) but make it cold.
    _unwinding = True
    raise WarmStop()


def _on_unraisable(unraisable: Any) -> None:
    """``sys.unraisablehook``: a :class:`WarmStop` that a stop request's handler raised
    where Python cannot raise (a finalizer, a weakref callback such as the one an
    import's module lock has) did not unwind the process. The request stands: the
    process's loop ends on ``stop_requested``, and a later request raises again. Any
    other exception goes to the hook there was before."""
    global _unwinding
    if isinstance(unraisable.exc_value, WarmStop):
        _unwinding = False  # it raised only from False: nothing unwinds
        return
    _previous_unraisablehook(unraisable)


def _on_stop_now(signum: int, frame: Any) -> None:
    """Ctrl-Break on a Windows console: stop now, as a second Ctrl-C would."""
    global _now
    _now = True
    if not stop_requested.is_set():
        _on_stop_request(signum, frame)
    _on_stop_request(signum, frame)


def _on_control_interrupt(signum: int, frame: Any) -> None:
    """SIGINT in a child on a console that broadcasts Ctrl-C: act only on our own."""
    global _control_interrupts
    if _control_interrupts <= 0:
        return  # the console's Ctrl-C: our parent stops us through the control pipe
    _control_interrupts -= 1
    _on_stop_request(signum, frame)


def _stop_from_control(platform: platforms.Platform) -> None:
    """A stop request that arrived on the control pipe, handled in the watching thread.

    What can be done from here is: a deferred target only watches ``stop_requested``,
    and setting the event wakes it even from waits that no signal breaks on Windows
    (locks, ``Event.wait``). Unwinding needs the main thread: it is interrupted.
    """
    global _now, _control_interrupts
    if _unwinding:
        stop_requested.set()
        _now = True  # a second request while stopping our own children: make it cold
        return
    if _deferred and not stop_requested.is_set():
        stop_requested.set()
        return
    _control_interrupts += 1
    platform.interrupt_main_thread()


class _ControlWatch:
    """Turns what the control pipe says into stop requests: a message asks for a warm
    stop, EOF means the parent died."""

    def __init__(self, control: Any, platform: platforms.Platform, orphan_grace: float,
                 kill_with_parent: bool):  # fmt: skip
        self.control = control
        self.platform = platform
        self.orphan_grace = orphan_grace
        self.kill_with_parent = kill_with_parent
        self.orphaned = False

    def run(self) -> None:
        """The watching thread (Windows): read until the parent's end closes."""
        while True:
            try:
                self.control.recv_bytes()
            except (EOFError, OSError):
                break
            _stop_from_control(self.platform)
        self.leave_orphaned()
        _stop_from_control(self.platform)
        time.sleep(self.orphan_grace)
        os._exit(EXIT_ORPHANED)

    def on_signal(self, signum: int, frame: Any) -> None:
        """The signal that the pipe has something to say (macOS), in the main thread."""
        if self.orphaned:
            return
        try:
            if not self.control.poll(0):
                return  # nothing to read: a signal meant for another descriptor
            self.control.recv_bytes()
        except (EOFError, OSError):
            self.orphaned = True
            self.leave_orphaned()
            threading.Thread(target=self._exit_after_grace, daemon=True).start()
        _on_stop_request(signum, frame)

    def leave_orphaned(self) -> None:
        """The parent died. No orphan survives its supervisor: user code leaves at once,
        with its whole tree, as Linux's parent-death SIGKILL would have it."""
        if self.kill_with_parent:
            try:
                self.platform.kill_descendants()
            finally:
                os._exit(EXIT_ORPHANED)

    def _exit_after_grace(self) -> None:
        # Even one stuck where no handler runs: give it the grace period, then leave.
        time.sleep(self.orphan_grace)
        os._exit(EXIT_ORPHANED)


def _after_fork_in_child() -> None:
    global stop_requested, _deferred, _unwinding, _now, _control_interrupts, _stop_signal
    stop_requested = StopRequest()
    _deferred = _unwinding = _now = False
    _stop_signal = None
    _control_interrupts = 0


platforms.at_fork_in_child(_after_fork_in_child)
