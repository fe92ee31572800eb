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

#: Set once a warm stop was requested.
stop_requested = threading.Event()
_deferred = False
_unwinding = False
_now = False


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


@contextmanager
def unwinding() -> Iterator[None]:
    """While the launcher stops this process's children, stop requests do not unwind."""
    global _unwinding
    _unwinding = True
    try:
        yield
    finally:
        _unwinding = False


def install(control: Any = None, interrupt_main: Any = None, orphan_grace: float = 10.0) -> None:
    """Install the warm-stop handling of a freshly booted child.

    The handlers replace any a fork child inherited from its parent. ``control`` is
    the read end of the control pipe the launcher gives children where warm stops
    or the parent's death cannot be signalled; ``interrupt_main`` runs the main
    thread's handler from the thread that watches it, and ``orphan_grace`` is how
    long an orphan may take to stop before it exits hard.
    """
    import signal

    signal.signal(signal.SIGTERM, _on_stop_request)
    # A child leads its own process group, so a terminal's Ctrl-C does not reach
    # it; a SIGINT sent to it on purpose means the same as SIGTERM.
    signal.signal(signal.SIGINT, _on_stop_request)
    if control is not None:
        threading.Thread(
            target=_watch_control,
            args=(control, interrupt_main, orphan_grace),
            name="spawnflow-control",
            daemon=True,
        ).start()


def _on_stop_request(signum: int, frame: Any) -> None:
    global _now, _unwinding
    first = not stop_requested.is_set()
    stop_requested.set()
    if _unwinding:
        _now = True
        return
    if _deferred and first:
        return
    # From here on the process unwinds; a further request must not interrupt the
    # clean-up (stopping our own children) but make it cold.
    _unwinding = True
    raise WarmStop()


def _watch_control(control: Any, interrupt_main: Any, orphan_grace: float) -> None:
    """Turn a message on the control pipe into a stop request; EOF means the parent died."""
    try:
        control.recv_bytes()
        orphaned = False
    except (EOFError, OSError):
        orphaned = True
    interrupt_main()
    if orphaned:
        # No orphan survives its supervisor, even one stuck where no handler runs:
        # give it the grace period, then leave.
        time.sleep(orphan_grace)
        os._exit(EXIT_ORPHANED)


def _after_fork_in_child() -> None:
    global stop_requested, _deferred, _unwinding, _now
    stop_requested = threading.Event()
    _deferred = _unwinding = _now = False


os.register_at_fork(after_in_child=_after_fork_in_child)
