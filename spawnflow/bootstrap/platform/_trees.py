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


def suspend_tree(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Stop ``processes`` and every descendant, walking again below each batch until the
    walk finds none it has not stopped (a process forks until it is stopped); the live
    ones of them, each once."""
    stopped: dict[int, psutil.Process] = {}
    batch = [p for p in processes if running(p)]
    while batch:
        suspend(batch)
        stopped.update((p.pid, p) for p in batch)
        batch = [p for p in with_descendants(batch) if p.pid not in stopped]
    return [p for p in stopped.values() if running(p)]


def children_first(processes: list[psutil.Process]) -> list[psutil.Process]:
    """``processes`` ordered so that each comes before its parent (and every ancestor)
    among them: the deepest first."""
    parents = {p.pid: parent_of(p) for p in processes}

    def depth(pid: int | None) -> int:
        ancestors = 0  # bounded: a pid cannot be its own ancestor, even if reused
        while (pid := parents.get(pid)) in parents and ancestors < len(parents):
            ancestors += 1
        return ancestors

    return sorted(processes, key=lambda p: depth(p.pid), reverse=True)


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
