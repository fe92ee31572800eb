"""The POSIX calls spawnflow makes: process groups, Linux's prctl, signal-driven I/O.

Defined on Linux and macOS only. Callers test ``sys.platform`` before using them (type
checkers for Windows narrow on it and skip the call) and the current Platform's flags
(which a test's simulated OS sets, keeping them out of the Windows code path).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

if sys.platform != "win32":
    #: The signal the kernel sends when a pipe opened with :func:`signal_on_input` has
    #: data or loses its writer.
    IO_SIGNAL = signal.SIGIO

    def lead_own_group() -> None:
        """Make the calling process the leader of a new process group."""
        try:
            os.setpgid(0, 0)
        except PermissionError:
            pass  # a session leader cannot change its group; it already leads one

    @contextmanager
    def interrupts_held(exec_follows: bool) -> Iterator[None]:
        """While a child starts, make it deaf to a terminal's Ctrl-C until it leads a
        group of its own (:func:`hear_interrupts_again`): until then it is in ours, and
        one that exec's (spawn, and the forkserver) cannot be moved out of it from here.

        SIGINT is blocked in this thread, which a fork child inherits. A new interpreter
        (``exec_follows``: spawn, and the forkserver's first start) is not kept deaf by
        the mask alone: it takes a Ctrl-C while it imports (seen here: KeyboardInterrupt
        in multiprocessing's imports). An ignored signal stays ignored through an exec, and
        Python then installs no KeyboardInterrupt handler: with ``exec_follows`` SIGINT
        is also ignored meanwhile, from the main thread, for the few milliseconds of the
        start (a forkserver's first start waits for its boot). A Ctrl-C meant for us in
        that time stays pending while blocked in this thread (Linux keeps a blocked
        signal even when ignored) and reaches us when the block ends; one the kernel
        gives another thread of ours, or macOS, which drops an ignored signal, is lost:
        the second Ctrl-C then counts as the first."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            if exec_follows:
                with interrupts_ignored():
                    yield
            else:
                yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    @contextmanager
    def interrupts_ignored() -> Iterator[None]:
        """SIGINT ignored while a child starts (from the main thread only: Python sets
        handlers there): an exec'd child keeps it ignored until it takes SIGINT again."""
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            yield
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def hear_interrupts_again() -> None:
        """In a child that now leads its own group: forget a Ctrl-C that reached it while
        it booted in its parent's group (its parent stops it, warm, as it should), then
        take SIGINT again as Python does, with KeyboardInterrupt. Ignoring a signal
        discards it while it is pending (POSIX)."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def move_to_own_group(pid: int) -> None:
        """Put child ``pid`` in a group of its own, if it still can be moved.

        Only a fork child can be: a spawned one has exec'd (EACCES), a forkserver one is
        not our child (ESRCH).
        """
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass

    def group_of(pid: int) -> int | None:
        try:
            return os.getpgid(pid)
        except (ProcessLookupError, PermissionError):
            return None

    def own_group() -> int:
        return os.getpgrp()

    def signal_group(pgid: int, *, kill: bool) -> None:
        """SIGKILL (``kill``) or SIGTERM to every process of group ``pgid``, if any is left."""
        try:
            os.killpg(pgid, signal.SIGKILL if kill else signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass

    def pid_exists(pid: int) -> bool:
        try:
            os.kill(pid, 0)  # signal 0 only checks that the process exists
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def interrupt_main_thread() -> None:
        """A real SIGINT to the main thread: its handler runs and a blocking call breaks."""
        ident = threading.main_thread().ident
        assert ident is not None  # the main thread has started: we run in this process
        signal.pthread_kill(ident, signal.SIGINT)

    def set_parent_death_signal(kill: bool) -> None:
        """Linux: have the kernel send SIGKILL (``kill``) or SIGTERM when our parent dies."""
        pr_set_pdeathsig = 1
        libc().prctl(pr_set_pdeathsig, signal.SIGKILL if kill else signal.SIGTERM, 0, 0, 0)

    def set_process_name(name: str) -> None:
        """Linux: the name ``ps``, ``top`` and ``/proc/<pid>/comm`` show (15 bytes at most)."""
        pr_set_name = 15
        libc().prctl(pr_set_name, name.encode()[:15], 0, 0, 0)

    def become_subreaper() -> None:
        """Linux: orphaned descendants are re-parented to us instead of to init."""
        pr_set_child_subreaper = 36
        libc().prctl(pr_set_child_subreaper, 1, 0, 0, 0)

    def fork_patiently(patience: float) -> int:
        """``os.fork()`` for a forkserver's loop, which a refused fork ends: a refusal
        that may pass (EAGAIN: a limit on processes; ENOMEM) is tried again, the pause
        doubling from 10 ms up to 1 s, for ``patience`` seconds before it is raised."""
        import errno
        import time

        pause, waited = 0.01, 0.0
        while True:
            try:
                return os.fork()
            except OSError as refused:
                if refused.errno not in (errno.EAGAIN, errno.ENOMEM) or waited >= patience:
                    raise
            time.sleep(pause)
            waited += pause
            pause = min(2 * pause, 1.0)

    def resource_tracker_running() -> None:
        """Start multiprocessing's resource tracker unless it runs: what a spawn launch
        and a forkserver's start do first (see ``Platform.launching``)."""
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()

    def signal_on_input(fd: int) -> None:
        """Have the kernel send :data:`IO_SIGNAL` to this process when ``fd`` (a pipe's read
        end) becomes readable or its last writer closes it (``O_ASYNC``)."""
        import fcntl  # here, not at import: only macOS watches its control pipe this way

        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)

    @functools.cache
    def libc() -> Any:
        """The C library of this process, for ``prctl`` (Linux).

        Loaded once: a parent that forks children loads it before the first fork (see the
        launcher), so that no fork child pays for ``dlopen``.
        """
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
