"""Operating-system differences, in one place.

This is the only module in spawnflow that branches on the operating system. Each
OS is described by a :class:`Platform` object; the process-handling code asks the
object instead of testing ``sys.platform`` itself, so a test can hand it the
Windows or macOS description and drive those code paths on Linux wherever the
underlying calls exist here (the psutil tree walk, the control-pipe warm stop).

psutil is imported lazily: a child that never stops anything should not pay for it.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    import psutil

#: Every start method spawnflow knows, in the order we list them to users.
START_METHODS = ("fork", "forkserver", "spawn")


class Platform(msgspec.Struct, frozen=True):
    """What an operating system offers to a process supervisor."""

    name: str
    display_name: str
    start_methods: tuple[str, ...]
    default_start_method: str
    #: POSIX process groups (``setpgid``/``killpg``).
    process_groups: bool
    #: A warm stop is SIGTERM. Where it is not (Windows: there is no SIGTERM
    #: between processes), the launcher gives each child a control pipe instead.
    stop_by_signal: bool

    # -- in the child -------------------------------------------------------------

    def enter_own_process_group(self) -> None:
        """Make the calling process the leader of a new process group.

        Two reasons: a terminal's Ctrl-C (SIGINT to the foreground group) then reaches
        only the top-level process, which stops its children warm-then-cold instead of
        every process dying at once; and a cold stop can ``killpg`` the group, which
        also reaches grandchildren that a dead intermediate left behind (for example
        ``sh -c 'sleep 100 &'``), which a walk of the live tree would miss.
        """
        if not self.process_groups:
            return
        try:
            os.setpgid(0, 0)
        except PermissionError:
            # A session leader cannot change its group; it already leads one.
            pass

    # -- in the parent ------------------------------------------------------------

    def request_warm_stop(self, pid: int, control=None) -> None:
        """Ask process ``pid`` to stop after finishing its work."""
        if not self.stop_by_signal:
            if control is not None:
                try:
                    control.send_bytes(b"stop")
                except (OSError, ValueError):
                    pass  # the child is gone or its pipe closed: nothing to ask
            return
        try:
            # Signal the whole group only when the child leads its own: before the
            # child's first instruction it still shares ours, and killpg(ours) would
            # stop the parent too.
            if self.process_groups and _group_of(pid) == pid:
                os.killpg(pid, signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

    def snapshot_tree(self, pid: int) -> list[psutil.Process]:
        """The process ``pid`` and all its live descendants, as psutil handles.

        psutil handles remember each process's creation time, so acting on one later
        never reaches an unrelated process that reused the pid.
        """
        import psutil

        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def kill_tree(self, processes: list[psutil.Process], timeout: float = 10.0) -> None:
        """Kill every process in ``processes`` (a cold stop) and wait until they are gone."""
        import psutil

        alive = [p for p in processes if _running(p)]
        if self.process_groups:
            alive = self._freeze_and_widen(alive)
            own_group = os.getpgrp()
            for group in {_group_of(p.pid) for p in alive} - {own_group, None}:
                # Only groups led by a process of this tree: never a stranger's group.
                if any(p.pid == group for p in alive):
                    try:
                        os.killpg(group, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
        for proc in alive:
            try:
                proc.kill()  # SIGKILL on POSIX, TerminateProcess on Windows
            except psutil.Error:
                pass
        _wait_gone(alive, timeout)

    def _freeze_and_widen(self, processes: list[psutil.Process]) -> list[psutil.Process]:
        """Stop (SIGSTOP) every process, then collect descendants again.

        A process that is being killed can fork in the meantime; stopped processes
        cannot, so after one more walk the set is complete.
        """
        import psutil

        seen = {p.pid: p for p in processes}
        for proc in processes:
            try:
                proc.suspend()
            except psutil.Error:
                pass
        for proc in list(seen.values()):
            try:
                for child in proc.children(recursive=True):
                    seen.setdefault(child.pid, child)
            except psutil.Error:
                pass
        return [p for p in seen.values() if _running(p)]

    def kill_group(self, pgid: int) -> None:
        """Kill what is left in process group ``pgid`` (POSIX; nothing on Windows).

        Call it only while the group's leader is an unreaped child of ours: then
        the id cannot belong to anyone else.
        """
        if not self.process_groups or pgid == os.getpgrp():
            return
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def has_exited(self, pid: int) -> bool:
        """Whether ``pid`` is gone or a zombie (exited, waiting to be reaped)."""
        import psutil

        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            return False

    # -- facts --------------------------------------------------------------------

    def signal_name(self, exitcode: int | None) -> str | None:
        """The name of the signal behind a negative multiprocessing exit code."""
        if exitcode is None or exitcode >= 0:
            return None
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"


def _wait_gone(processes: list[psutil.Process], timeout: float) -> None:
    """Wait until none of ``processes`` runs any more (zombies count as gone).

    Our own children are left to their caller: psutil would reap them with
    ``waitpid`` and multiprocessing, which reaps them too, would never learn their
    exit code.
    """
    import time

    import psutil

    me = os.getpid()
    pending = [p for p in processes if _parent_of(p) != me]
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        _, pending = psutil.wait_procs(pending, timeout=0.05)
        pending = [p for p in pending if _running(p)]


def _parent_of(proc: psutil.Process) -> int | None:
    import psutil

    try:
        return proc.ppid()
    except psutil.Error:
        return None


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError, AttributeError):
        return None


def _running(proc: psutil.Process) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


LINUX = Platform(
    name="linux",
    display_name="Linux",
    start_methods=START_METHODS,
    default_start_method="forkserver",
    process_groups=True,
    stop_by_signal=True,
)
MACOS = Platform(
    name="darwin",
    display_name="macOS",
    start_methods=START_METHODS,
    # fork is unsafe on macOS once any system framework has started a thread;
    # CPython itself moved the default to spawn there in 3.8.
    default_start_method="spawn",
    process_groups=True,
    stop_by_signal=True,
)
WINDOWS = Platform(
    name="windows",
    display_name="Windows",
    start_methods=("spawn",),
    default_start_method="spawn",
    process_groups=False,
    stop_by_signal=False,
)


def detect() -> Platform:
    """The description of the OS this process runs on."""
    if sys.platform == "win32":
        return WINDOWS
    if sys.platform == "darwin":
        return MACOS
    return LINUX


_current = detect()


def current() -> Platform:
    """The platform the process code acts for (the detected one unless a test set another)."""
    return _current


def use(platform: Platform) -> Platform:
    """Make ``platform`` the current one and return the previous (for tests)."""
    global _current
    previous, _current = _current, platform
    return previous


def by_name(name: str) -> Platform:
    """Look a platform up by its name (``linux``, ``darwin``, ``windows``)."""
    for candidate in (LINUX, MACOS, WINDOWS):
        if candidate.name == name:
            return candidate
    raise ValueError(f"unknown platform {name!r}")


def peak_rss_bytes() -> int | None:
    """This process's peak resident set size, where the OS reports one."""
    try:
        import resource
    except ImportError:  # Windows
        import psutil

        return getattr(psutil.Process().memory_info(), "peak_wset", None)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kilobytes, macOS bytes.
    return peak if sys.platform == "darwin" else peak * 1024
