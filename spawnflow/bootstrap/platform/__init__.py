"""Operating-system differences, in one place.

This is the only package in spawnflow that branches on the operating system. Each OS
is described by a :class:`Platform` object; the process-handling code asks the
object instead of testing ``sys.platform`` itself. Inside, every OS-specific call
sits behind two tests: the Platform's flag, which says what spawnflow does on that
OS (and which a test's simulated Windows or macOS sets in every process), and
``sys.platform``, which says what this interpreter can call (and which type checkers
narrow on, so ``mypy --platform win32`` and ``--platform darwin`` check each path).
The calls themselves live in ``_posix`` and ``_windows``.

Processes are handled through psutil handles, which remember when the process
started: acting on a handle never reaches an unrelated process that reused the pid.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from spawnflow.bootstrap.platform import _posix, _trees, _windows

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
    #: POSIX process groups (``setpgid``/``killpg``), signals between processes and
    #: between threads. False only on Windows.
    process_groups: bool
    #: A warm stop is SIGTERM. Where it is not (Windows: there is no SIGTERM between
    #: processes), it travels on the child's control pipe.
    stop_by_signal: bool
    #: The kernel signals a child when its parent dies (Linux's PR_SET_PDEATHSIG).
    #: Elsewhere the child watches its control pipe for the EOF of its parent's death.
    parent_death_signal: bool
    #: The console delivers Ctrl-C and Ctrl-Break to every process attached to it
    #: (Windows): children leave both to the top-level command.
    console_broadcast: bool = False
    #: The most objects one multiprocessing wait may watch from the main thread
    #: (Windows' WaitForMultipleObjects takes 64, one of them the interpreter's SIGINT
    #: event); None where there is no such limit.
    wait_limit: int | None = None
    #: The longest AF_UNIX socket path in bytes (the forkserver listens on one).
    unix_path_max: int | None = None
    #: ``fork`` exists but is unsafe once a system framework has started a thread
    #: (macOS): allowed, with a warning.
    fork_unsafe: bool = False

    @property
    def control_pipe(self) -> bool:
        """Whether children need a control pipe (for warm stops or to see the parent die)."""
        return not (self.stop_by_signal and self.parent_death_signal)

    @property
    def control_by_signal(self) -> bool:
        """Whether the kernel signals a child when its control pipe has something to say.

        True where the pipe only ever reports the parent's death (macOS): no thread then
        watches it, so a child that forks does so single-threaded. Windows needs the
        thread: stops travel on the pipe and there is no signal-driven I/O.
        """
        return self.control_pipe and self.stop_by_signal

    # -- in the child -------------------------------------------------------------

    def enter_own_process_group(self) -> None:
        """Make the calling process the leader of a new process group.

        Two reasons: a terminal's Ctrl-C (SIGINT to the foreground group) then reaches
        only the top-level process, which stops its children warm-then-cold instead of
        every process dying at once; and a cold stop can ``killpg`` the group, which
        also reaches grandchildren that a dead intermediate left behind (for example
        ``sh -c 'sleep 100 &'``), which a walk of the live tree would miss.
        """
        if self.process_groups and sys.platform != "win32":
            _posix.lead_own_group()
            _posix.hear_interrupts_again()  # held since launching()

    def shield_from_console(self) -> None:
        """Leave the console's Ctrl-C and Ctrl-Break to the top-level command (Windows).

        A Windows console delivers both to every process attached to it, where POSIX
        children sit out of reach in groups of their own. Ctrl-C is switched off for
        this process and the processes it starts (the SIGINT handler still runs for the
        control pipe's own interrupts, see :mod:`~spawnflow.bootstrap.lifecycle`);
        Ctrl-Break cannot be switched off that way, so it is ignored.
        """
        if not self.console_broadcast:
            return
        ctrl_break = getattr(signal, "SIGBREAK", None)
        if ctrl_break is not None:
            signal.signal(ctrl_break, signal.SIG_IGN)
        if sys.platform == "win32":
            _windows.ignore_console_ctrl_c()

    @contextmanager
    def launching(self, exec_follows: bool) -> Iterator[None]:
        """Around the start of a child, so that a Ctrl-C pressed while it boots cannot end
        it before it is out of the console's or terminal's reach: on Windows the child is
        born ignoring the console's Ctrl-C (see :meth:`shield_from_console`); on POSIX it
        is born deaf to SIGINT until it leads its own group (see
        :meth:`enter_own_process_group`). ``exec_follows``: the start runs a new
        interpreter from this process (see ``startmethods.starts_by_exec``).

        On POSIX such a start first needs multiprocessing's resource tracker, which is
        started here if it does not run, before SIGINT is held: the standard library
        starts it with SIGINT blocked and unblocks it afterwards, which inside the
        window would deliver a Ctrl-C that came meanwhile while SIGINT is ignored,
        discarding it (seen: a triggerer that never stopped on a Ctrl-C pressed while it
        started its first runner). Only there: Windows has no tracker, and under its
        simulation, where the standard library cannot block signals, the tracker must
        start inside the window, born deaf to the console's Ctrl-C as every child is
        (from the main thread, the only one that can ignore SIGINT there)."""
        if self.console_broadcast and sys.platform == "win32":
            with _windows.children_born_ignoring_ctrl_c():
                yield
        elif sys.platform != "win32" and self.process_groups:
            if exec_follows:
                resource_tracker_running()
            with _posix.interrupts_held(exec_follows=exec_follows):
                yield
        elif sys.platform != "win32" and self.console_broadcast:
            # A console that broadcasts, off Windows: the OS simulation's. A SIGINT ignored
            # from birth is what Windows' flag gives the child.
            with _posix.interrupts_ignored():
                yield
        else:
            yield

    def contain_tree(self) -> bool:
        """Hold this process and everything it starts in a kill-on-close job (Windows).

        When this process ends, however it ends, Windows terminates what is left of its
        tree: there are no process groups to ``killpg``, and a walk of the live tree
        misses processes whose parent already exited. False where nothing holds the tree.
        """
        if self.name == "windows" and sys.platform == "win32":
            return _windows.enter_kill_on_close_job()
        return False

    def stop_when_parent_dies(self, parent_pid: int, kill: bool = False) -> bool:
        """Ask the kernel for SIGTERM (SIGKILL if ``kill``) when our parent dies.

        Returns False if the parent is already gone (it died before we asked).
        """
        if not self.parent_death_signal or sys.platform == "win32":
            return True
        _posix.set_parent_death_signal(kill)
        # The parent may have died between our fork and the prctl call: then no
        # signal will ever come, so look for ourselves.
        return _posix.pid_exists(parent_pid)

    def name_process(self, role: str) -> None:
        """Show the child's role as its process name in ``ps`` and ``top`` (Linux, where
        every child of a spawned tree is otherwise a ``python``; elsewhere nothing)."""
        if self.parent_death_signal and sys.platform != "win32":  # the prctl family
            _posix.set_process_name(role)

    def control_signal(self) -> int | None:
        """The signal :meth:`signal_on_control_input` asks for, or None where a thread
        must watch the control pipe (Windows). Install its handler first: where its
        default action is to end the process (Linux), it would otherwise do so."""
        if not self.control_by_signal or sys.platform == "win32":
            return None
        return _posix.IO_SIGNAL

    def signal_on_control_input(self, control: Any) -> None:
        """Have the kernel send :meth:`control_signal` when the control pipe reports the
        parent's death."""
        if self.control_by_signal and sys.platform != "win32":
            _posix.signal_on_input(control.fileno())

    def adopt_orphans(self) -> None:
        """Make orphaned descendants of this process come back to it (Linux).

        A descendant whose parent dies is normally re-parented to init, out of our
        tree, where no tree walk finds it. As a "child subreaper" this process
        inherits such orphans instead, so :meth:`kill_descendants` can reach them.
        Elsewhere there is no such thing; the walk sees what is still attached.
        """
        if self.parent_death_signal and sys.platform != "win32":  # the prctl family
            _posix.become_subreaper()

    def kill_descendants(self) -> list[psutil.Process]:
        """Kill every process below this one (before this one leaves); those it killed."""
        import psutil

        try:
            descendants = psutil.Process().children(recursive=True)
        except psutil.Error:
            return []
        if descendants:
            self.kill_tree(descendants)
        return descendants

    def interrupt_main_thread(self) -> None:
        """From another thread, run the main thread's SIGINT handler as soon as possible.

        POSIX: a real SIGINT sent to the main thread, which also breaks a blocking
        call. Windows: ``raise()`` runs the C-level handler in this thread, which
        flags the signal and sets the event that ``time.sleep`` and multiprocessing's
        waits in the main thread also wait on; other blocking calls are not broken.
        """
        if self.process_groups and sys.platform != "win32":
            _posix.interrupt_main_thread()
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
            descriptor = connection.fileno()
            if sys.platform == "win32":
                descriptor = _windows.descriptor_for(descriptor)
            os.dup2(descriptor, fd)
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

        Only when the connection is ready (``multiprocessing.connection.wait`` says so).
        The child writes raw bytes, not framed messages: POSIX reads the descriptor;
        a Windows message-mode pipe gives one write per read.
        """
        if sys.platform == "win32":
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
        child can be moved; for the others the window stays, until the child's own call.
        """
        if self.process_groups and sys.platform != "win32":
            _posix.move_to_own_group(pid)

    def request_warm_stop(self, handle: psutil.Process, control=None, group: bool = True) -> None:
        """Ask the process behind ``handle`` to stop after finishing its work.

        With ``group``, every process of the group it leads is asked (SIGTERM to
        the group), as a shell does for a job.
        """
        import psutil

        if not self.stop_by_signal or sys.platform == "win32":
            if control is not None:
                try:
                    control.send_bytes(b"stop")
                except (OSError, ValueError):
                    pass  # the child is gone or its pipe closed: nothing to ask
            return
        if not _trees.running(handle):
            return
        # Signal the whole group only when the child leads its own: before the child's
        # first instruction it still shares ours, and killpg(ours) would stop us too.
        if group and self.process_groups and _posix.group_of(handle.pid) == handle.pid:
            _posix.signal_group(handle.pid, kill=False)
            return
        try:
            handle.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass

    def snapshot_tree(self, handle: psutil.Process | None) -> list[psutil.Process]:
        """The process behind ``handle`` and its live descendants, or [] once it exited."""
        import psutil

        if handle is None or not _trees.running(handle):
            return []
        try:
            return [handle, *handle.children(recursive=True)]
        except psutil.Error:
            return []

    def kill_tree(self, processes: list[psutil.Process], timeout: float = 10.0) -> None:
        """Kill every process in ``processes`` (a cold stop) and wait until they are gone.

        POSIX stops the whole tree first (a stopped process cannot fork, or see another
        one die and act on it), then kills it children first, each process with the
        group it leads (what of the group left the tree, re-parented, goes too). The
        order matters: when a process dies, POSIX sends SIGHUP and SIGCONT to each
        process group of its children that its death orphans, so a parent killed
        first would wake its stopped children, and a worker that ignores SIGHUP (as
        under ``nohup``) would see its task killed and record a failure for it.
        """
        if not processes:
            return
        alive = [p for p in processes if _trees.running(p)]
        if self.process_groups and sys.platform != "win32":
            alive = _trees.suspend_tree(alive)
            own = _posix.own_group()
            # Only groups led by a live process of this tree: never a stranger's.
            leaders = {p.pid for p in alive if _posix.group_of(p.pid) == p.pid != own}
            for proc in _trees.children_first(alive):
                if proc.pid in leaders:  # while its leader lives: the group is still ours
                    _posix.signal_group(proc.pid, kill=True)
                _trees.kill([proc])
        else:
            _trees.kill(alive)
        _trees.wait_gone(alive, timeout)

    def kill_group(self, pgid: int, leader: psutil.Process | None) -> None:
        """Kill what is left in process group ``pgid``, which ``leader`` led.

        Linux and macOS do not reuse a pid while a process group of that id still
        has members, so a group of leftovers is still ours. The one unsafe case is a
        group with no members left whose id a new process took and made a group of
        its own: a live process with that pid that is not ``leader`` means exactly
        that, and we leave it alone.
        """
        import psutil

        if not self.process_groups or sys.platform == "win32" or pgid == _posix.own_group():
            return
        try:
            holder = psutil.Process(pgid)
            if leader is None or holder.create_time() != leader.create_time():
                return
        except psutil.NoSuchProcess:
            pass
        except psutil.Error:
            return
        _posix.signal_group(pgid, kill=True)

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
        return handle is None or not _trees.running(handle)

    # -- facts --------------------------------------------------------------------

    def signal_name(self, exitcode: int | None) -> str | None:
        """The name of the signal behind a negative multiprocessing exit code."""
        if exitcode is None or exitcode >= 0:
            return None
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"

    def exit_code_text(self, exitcode: int) -> str:
        """An exit code as people read it: Windows' crash codes are NTSTATUS values."""
        if self.name == "windows" and exitcode >= 0xC0000000:
            meaning = _NTSTATUS.get(exitcode)
            return f"0x{exitcode:08X}" + (f" ({meaning})" if meaning else "")
        return str(exitcode)

    def children_per_wait(self, objects_per_child: int = 2) -> int | None:
        """How many children one parent can watch in one wait (each with a channel and a
        sentinel), or None if there is no limit."""
        return None if self.wait_limit is None else self.wait_limit // objects_per_child


#: The NTSTATUS codes a Windows process most often ends with when it crashes.
_NTSTATUS = {
    0xC0000005: "access violation",
    0xC0000017: "out of memory",
    0xC00000FD: "stack overflow",
    0xC000013A: "Ctrl-C",
    0xC0000409: "stack buffer overrun",
}

LINUX = Platform(
    name="linux",
    display_name="Linux",
    start_methods=START_METHODS,
    default_start_method="forkserver",
    process_groups=True,
    stop_by_signal=True,
    parent_death_signal=True,
    unix_path_max=107,  # sun_path is 108 bytes, with the terminating NUL
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
    unix_path_max=103,  # sun_path is 104 bytes
    fork_unsafe=True,
)
WINDOWS = Platform(
    name="windows",
    display_name="Windows",
    start_methods=("spawn",),
    default_start_method="spawn",
    process_groups=False,
    stop_by_signal=False,
    parent_death_signal=False,
    console_broadcast=True,
    wait_limit=63,
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


def at_fork_in_child(function: Callable[[], object]) -> None:
    """Run ``function`` in every child this process forks, where processes fork.

    Windows has neither fork nor ``os.register_at_fork``; nothing inherits memory
    there, so there is nothing to drop.
    """
    if "fork" in current().start_methods and sys.platform != "win32":
        os.register_at_fork(after_in_child=function)


#: Windows' MAX_PATH: longer paths need the extended-length prefix there.
_MAX_PATH = 260


def usable_path(path: Path) -> Path:
    """``path``, in a form this OS can open however long it is.

    Windows refuses paths of 260 characters or more unless long paths were switched on
    for the whole machine, or the path carries the extended-length prefix (``\\\\?\\``).
    """
    if sys.platform == "win32" and len(str(path)) >= _MAX_PATH:
        text = os.path.abspath(path)
        if not text.startswith("\\\\?\\"):
            return Path("\\\\?\\" + text)
    return path


def resource_tracker_running() -> None:
    """Start multiprocessing's resource tracker unless it runs (POSIX): what a spawn
    launch and a forkserver's start do first. A launch hands its descriptor down, so
    that the children share it. Windows has no tracker process."""
    if sys.platform != "win32":
        _posix.resource_tracker_running()


def libc() -> Any:
    """The C library of this process (Linux), loaded once before a parent first forks."""
    if sys.platform != "win32":
        return _posix.libc()
    return None


def peak_rss_bytes() -> int | None:
    """This process's peak resident set size, where the OS reports one.

    Linux: ``VmHWM`` (``ru_maxrss`` survives ``exec``, so a spawned child would report
    the peak of the process it was forked from). macOS: ``ru_maxrss``, in bytes there.
    Windows: the peak working set. Never imports ``resource`` where the standard
    library has none: a ``resource.py`` in a Dags folder would be imported instead.
    """
    if sys.platform == "win32":
        import psutil

        return getattr(psutil.Process().memory_info(), "peak_wset", None)
    if sys.platform == "darwin":
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
