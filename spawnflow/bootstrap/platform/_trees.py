"""Process-tree helpers on psutil handles, the same on every OS.

psutil is imported lazily: a child that never stops anything should not pay for it.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil


def running(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs (a zombie, exited but not reaped, does not)."""
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def parent_of(proc: psutil.Process) -> int | None:
    import psutil

    try:
        return proc.ppid()
    except psutil.Error:
        return None


def with_descendants(processes: list[psutil.Process]) -> list[psutil.Process]:
    """``processes`` and every live descendant of theirs, each once."""
    import psutil

    seen = {p.pid: p for p in processes}
    for proc in list(seen.values()):
        try:
            for child in proc.children(recursive=True):
                seen.setdefault(child.pid, child)
        except psutil.Error:
            pass
    return [p for p in seen.values() if running(p)]


def suspend(processes: list[psutil.Process]) -> None:
    """Stop (SIGSTOP) each process: a stopped process cannot fork while we kill its tree."""
    import psutil

    for proc in processes:
        try:
            proc.suspend()
        except psutil.Error:
            pass


def kill(processes: list[psutil.Process]) -> None:
    """SIGKILL on POSIX, ``TerminateProcess`` (exit code 15) on Windows."""
    import psutil

    for proc in processes:
        try:
            proc.kill()
        except psutil.Error:
            pass


def wait_gone(processes: list[psutil.Process], timeout: float) -> None:
    """Wait until none of ``processes`` runs any more (zombies count as gone).

    Our own children are left to their caller: psutil would reap them with ``waitpid``
    and multiprocessing, which reaps them too, would never learn their exit code.
    """
    import psutil

    me = os.getpid()
    pending = [p for p in processes if parent_of(p) != me]
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        _, pending = psutil.wait_procs(pending, timeout=0.05)
        pending = [p for p in pending if running(p)]
