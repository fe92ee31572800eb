"""How a launched child takes a warm stop, and the exit codes it reports.

By default a warm stop (SIGTERM, or the control pipe where there are no signals)
raises :class:`WarmStop` in the child's main thread: ``finally`` blocks and context
managers run, the launcher stops the child's own children, and the process exits
with :data:`EXIT_OK`. A target that wants to finish its current work first calls
:func:`defer_warm_stop` and watches :data:`stop_requested`; a second request then
stops it at once ("a second Ctrl-C means now").
"""

from __future__ import annotations

import _thread
import signal
import threading
from typing import Any

#: The target returned, or stopped warm when asked to.
EXIT_OK = 0
#: The target raised an exception (its traceback is in the role's log file).
EXIT_TARGET_FAILED = 1
#: The child could not boot: the spec, settings, logging or target import failed.
#: A supervisor should report this, not restart the child (gunicorn's WORKER_BOOT_ERROR).
EXIT_BOOT_FAILED = 3

EXIT_MEANINGS = {
    EXIT_OK: "finished",
    EXIT_TARGET_FAILED: "target failed",
    EXIT_BOOT_FAILED: "boot failed",
}

#: Set once a warm stop was requested.
stop_requested = threading.Event()
_deferred = False


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


def install(control: Any = None) -> None:
    """Install the warm-stop handling of a freshly booted child.

    The handlers replace any a fork child inherited from its parent. ``control``
    is the read end of the control pipe the launcher gives children on systems
    without SIGTERM between processes.
    """
    global _deferred
    _deferred = False
    if stop_requested.is_set():  # inherited from a fork parent that was stopping
        stop_requested.clear()
    signal.signal(signal.SIGTERM, _on_stop_request)
    # A child leads its own process group, so a terminal's Ctrl-C does not reach
    # it; a SIGINT sent to it on purpose means the same as SIGTERM.
    signal.signal(signal.SIGINT, _on_stop_request)
    if control is not None:
        threading.Thread(
            target=_watch_control, args=(control,), name="spawnflow-control", daemon=True
        ).start()


def _on_stop_request(signum: int, frame: Any) -> None:
    first = not stop_requested.is_set()
    stop_requested.set()
    if _deferred and first:
        return
    raise WarmStop()


def _watch_control(control: Any) -> None:
    """Turn a message on the control pipe, or the parent's death (EOF), into SIGTERM."""
    try:
        control.recv_bytes()
    except (EOFError, OSError):
        pass
    # Runs the SIGTERM handler above in the main thread, as a real signal would.
    _thread.interrupt_main(signal.SIGTERM)
