"""Operating-system differences, in one place.

This is the only module in spawnflow that branches on the operating system. Each
OS is described by a :class:`Platform` object; the process-handling code asks the
object instead of testing ``sys.platform`` itself, so a test can hand it the
Windows or macOS description and drive those code paths on Linux wherever the
underlying calls exist here (the psutil tree walk, the control-pipe warm stop and
parent watch).

Processes are handled through psutil handles, which remember when the process
started: acting on a handle never reaches an unrelated process that reused the pid.
psutil is imported lazily: a child that never stops anything should not pay for it.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

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
    #: between processes), it travels on the child's control pipe.
    stop_by_signal: bool
    #: The kernel signals a child when its parent dies (Linux's PR_SET_PDEATHSIG).
    #: Elsewhere the child watches its control pipe for the EOF of its parent's death.
    parent_death_signal: bool

    @property
    def control_pipe(self) -> bool:
        """Whether children need a control pipe (for warm stops or to see the parent die)."""
        return not (self.stop_by_signal and self.parent_death_signal)

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

    def stop_when_parent_dies(self, parent_pid: int, kill: bool = False) -> bool:
        """Ask the kernel for SIGTERM (SIGKILL if ``kill``) when our parent dies.

        Returns False if the parent is already gone (it died before we asked).
        """
        if not self.parent_death_signal:
            return True
        pr_set_pdeathsig = 1
        libc().prctl(pr_set_pdeathsig, signal.SIGKILL if kill else signal.SIGTERM, 0, 0, 0)
        # The parent may have died between our fork and the prctl call: then no
        # signal will ever come, so look for ourselves.
        return _pid_alive(parent_pid)

    def adopt_orphans(self) -> None:
        """Make orphaned descendants of this process come back to it (Linux).

        A descendant whose parent dies is normally re-parented to init, out of our
        tree, where no tree walk finds it. As a "child subreaper" this process
        inherits such orphans instead, so :meth:`kill_descendants` can reach them.
        Elsewhere there is no such thing; the walk sees what is still attached.
        """
        if not self.parent_death_signal:  # the Linux-only prctl family
            return
        pr_set_child_subreaper = 36
        libc().prctl(pr_set_child_subreaper, 1, 0, 0, 0)

    def kill_descendants(self) -> None:
        """Kill every process below this one (before this one leaves)."""
        import psutil

        try:
            descendants = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        if descendants:
            self.kill_tree(descendants)

    def interrupt_main_thread(self) -> None:
        """From another thread, run the main thread's SIGINT handler as soon as possible.

        POSIX: a real SIGINT sent to the main thread, which also breaks a blocking
        call. Windows: ``raise()`` runs the C-level handler in this thread, which
        flags the signal and sets the event that ``time.sleep`` and other waits of
        the main thread also wait on.
        """
        if hasattr(signal, "pthread_kill"):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        else:
            signal.raise_signal(signal.SIGINT)

    def redirect_output(self, stdout: Any, stderr: Any) -> None:
        """Point file descriptors 1 and 2 at the write ends of two launcher pipes.

        At the descriptor level, so that subprocesses and C code write there too.
        Windows pipe connections hold handles, which need a C runtime descriptor first.
        """
        for connection, fd, stream in ((stdout, 1, sys.stdout), (stderr, 2, sys.stderr)):
            if stream is not None:
                stream.flush()
            handle = connection.fileno()
            if self.name == "windows":
                import msvcrt

                handle = msvcrt.open_osfhandle(handle, os.O_WRONLY)
            os.dup2(handle, fd)
            connection.close()
        # New text streams on the descriptors: a fork child may have inherited
        # objects that write elsewhere (a test runner's capture buffer, say).
        import io

        sys.stdout = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace",
            line_buffering=True,
        )  # fmt: skip
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
            line_buffering=True,
        )  # fmt: skip

    # -- in the parent ------------------------------------------------------------

    def read_output(self, connection: Any) -> bytes:
        """What a captured child wrote since the last read; b"" once it closed the pipe.

        Only when the connection is ready (``multiprocess.connection.wait`` says so).
        The child writes raw bytes, not framed messages: POSIX reads the descriptor;
        a Windows message-mode pipe gives one write per read.
        """
        if self.name == "windows":
            try:
                return connection.recv_bytes()
            except (EOFError, OSError):
                return b""
        try:
            return os.read(connection.fileno(), 65536)
        except OSError:
            return b""

    def adopt_into_own_group(self, pid: int) -> None:
        """Put a child we just forked in its own group from our side too.

        The child does the same first thing; doing it here as well closes the window
        in which a terminal's Ctrl-C would still reach a booting child. Only a fork
        child can be moved: a spawned one has exec'd (EACCES), a forkserver one is
        not our child (ESRCH); then the window stays, until the child's own call.
        """
        if not self.process_groups:
            return
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass

    def request_warm_stop(self, handle: psutil.Process, control=None, group: bool = True) -> None:
        """Ask the process behind ``handle`` to stop after finishing its work.

        With ``group``, every process of the group it leads is asked (SIGTERM to
        the group), as a shell does for a job.
        """
        import psutil

        if not self.stop_by_signal:
            if control is not None:
                try:
                    control.send_bytes(b"stop")
                except (OSError, ValueError):
                    pass  # the child is gone or its pipe closed: nothing to ask
            return
        if not _running(handle):
            return
        try:
            # Signal the whole group only when the child leads its own: before the
            # child's first instruction it still shares ours, and killpg(ours) would
            # stop the parent too.
            if group and self.process_groups and _group_of(handle.pid) == handle.pid:
                os.killpg(handle.pid, signal.SIGTERM)
            else:
                handle.send_signal(signal.SIGTERM)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            pass

    def snapshot_tree(self, handle: psutil.Process | None) -> list[psutil.Process]:
        """The process behind ``handle`` and its live descendants, or [] once it exited."""
        import psutil

        if handle is None or not _running(handle):
            return []
        try:
            return [handle, *handle.children(recursive=True)]
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
                # Only groups led by a live process of this tree: never a stranger's.
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

    def kill_group(self, pgid: int, leader: psutil.Process | None) -> None:
        """Kill what is left in process group ``pgid``, which ``leader`` led.

        Linux and macOS do not reuse a pid while a process group of that id still
        has members, so a group of leftovers is still ours. The one unsafe case is a
        group with no members left whose id a new process took and made a group of
        its own: a live process with that pid that is not ``leader`` means exactly
        that, and we leave it alone.
        """
        import psutil

        if not self.process_groups or pgid == os.getpgrp():
            return
        try:
            holder = psutil.Process(pgid)
            if leader is None or holder.create_time() != leader.create_time():
                return
        except psutil.NoSuchProcess:
            pass
        except psutil.Error:
            return
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_orphaned_group(self, pgid: int, started_after: float) -> None:
        """Kill process group ``pgid`` of a process that another one launched and lost.

        For a task process whose worker died: ``started_after`` (a timestamp from
        before it was launched) tells it apart from a process that reused its pid.
        """
        import psutil

        holder = self.handle(pgid)
        try:
            if holder is not None and holder.create_time() < started_after:
                return  # a process older than ours: someone else's
        except psutil.Error:
            holder = None  # gone since: only leftovers of its group remain
        self.kill_group(pgid, holder)

    def handle(self, pid: int) -> psutil.Process | None:
        """A psutil handle on ``pid``, or None if it already exited."""
        import psutil

        try:
            return psutil.Process(pid)
        except psutil.NoSuchProcess:
            return None

    def has_exited(self, handle: psutil.Process | None) -> bool:
        """Whether the process behind ``handle`` is gone or a zombie (exited, not reaped)."""
        return handle is None or not _running(handle)

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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


LINUX = Platform(
    name="linux",
    display_name="Linux",
    start_methods=START_METHODS,
    default_start_method="forkserver",
    process_groups=True,
    stop_by_signal=True,
    parent_death_signal=True,
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
    parent_death_signal=False,
)
WINDOWS = Platform(
    name="windows",
    display_name="Windows",
    start_methods=("spawn",),
    default_start_method="spawn",
    process_groups=False,
    stop_by_signal=False,
    parent_death_signal=False,
)


@functools.cache
def libc() -> Any:
    """The C library of this process, for ``prctl`` (Linux).

    Loaded once: a parent that forks children loads it before the first fork (see
    the launcher), so that no fork child pays for ``dlopen``.
    """
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


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
    """This process's peak resident set size, where the OS reports one.

    On Linux from ``VmHWM``: ``ru_maxrss`` survives ``exec``, so a spawned child
    would report the peak of the process it was forked from before it exec'd.
    """
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import resource
    except ImportError:  # Windows
        import psutil

        return getattr(psutil.Process().memory_info(), "peak_wset", None)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kilobytes, macOS bytes.
    return peak if sys.platform == "darwin" else peak * 1024
