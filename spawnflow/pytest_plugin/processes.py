"""What a test left running: the processes under this one that were not there before."""

from __future__ import annotations

import time

import psutil

#: Processes that live as long as the test session on purpose: multiprocessing's
#: forkserver and resource tracker, which a test's first use of them starts.
_SESSION_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def descendants() -> set[int]:
    """The pids of every process under this one."""
    return {p.pid for p in psutil.Process().children(recursive=True)}


def leftovers(before: set[int], grace: float) -> list[str]:
    """The processes under this one that ``before`` did not have, after waiting up to
    ``grace`` seconds for them to end (their parents may be stopping them); each
    described, then killed."""
    deadline = time.monotonic() + grace
    while True:
        left = [p for p in _new(before) if _running(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)  # polling processes that are not ours to wait for
    described = [_describe(p) for p in left]
    for process in left:
        try:
            process.kill()
        except psutil.Error:
            pass
    return described


def _new(before: set[int]) -> list[psutil.Process]:
    found = []
    for process in psutil.Process().children(recursive=True):
        if process.pid in before:
            continue
        try:
            command = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if not any(helper in command for helper in _SESSION_HELPERS):
            found.append(process)
    return found


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _describe(process: psutil.Process) -> str:
    try:
        return f"pid {process.pid} ({' '.join(process.cmdline())[:120]})"
    except psutil.Error:
        return f"pid {process.pid}"
