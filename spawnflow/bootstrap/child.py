"""The parent's handle on a launched child: wait for it, reap it, stop its tree.

:class:`Child` objects are made by :func:`spawnflow.bootstrap.launcher.launch`.
Every decision about a child's process goes through a psutil handle taken right
after it started, which remembers the process's start time: once the child has
exited, a process that reused its pid is never mistaken for it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from spawnflow.bootstrap import forkservers, lifecycle, wire
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.errors import UserError

if TYPE_CHECKING:
    from spawnflow.bootstrap.launcher import ChildSpec


class ChildBootError(UserError, RuntimeError):
    """A child exited, or never reported, before it was ready; the message is one sentence."""


class ExitStatus(msgspec.Struct, frozen=True):
    """How a child ended: its exit code, or the signal that killed it."""

    exitcode: int | None
    signal: str | None = None
    #: The child had to be killed because it outlived its warm stop's grace period.
    cold: bool = False

    @property
    def killed(self) -> bool:
        """Whether a kill ended it: a signal, or spawnflow's own cold stop (on Windows a
        kill is ``TerminateProcess``, which leaves an exit code, not a signal)."""
        return self.signal is not None or self.cold

    def describe(self, meaning: bool = True) -> str:
        """``killed by SIGKILL``, ``exited with code 3 (boot failed)``, ...

        ``meaning=False`` leaves out what spawnflow's exit codes mean, for a child
        that ended before spawnflow's entry point ran (the codes were not ours).
        """
        if self.signal is not None:
            return f"killed by {self.signal}"
        code = self.exitcode
        text = str(code) if code is None else platforms.current().exit_code_text(code)
        if self.cold:
            return f"killed after its grace period (exit code {text})"
        said = None
        if meaning and code is not None:
            said = lifecycle.EXIT_MEANINGS.get(code)
        return f"exited with code {text}" + (f" ({said})" if said else "")


class Child:
    """A launched child: its pid, sentinel and channel, and how to stop it."""

    def __init__(self, process: Any, spec: ChildSpec, method: str, channel: wire.Channel,
                 control: Any, launched_at: float):  # fmt: skip
        self._process = process
        self.spec = spec
        self.role = spec.role
        self.method = method
        self.pid: int = process.pid
        #: Becomes ready (for ``multiprocessing.connection.wait``) when the child exits.
        self.sentinel = process.sentinel
        #: The parent's end of the wire-protocol connection.
        self.channel = channel
        self._control = control
        self._platform = platforms.current()
        self._handle_taken = False
        self._handle_value: Any = None
        self._launched_at = launched_at
        #: Read ends of the child's stdout and stderr, when its spec captures output.
        self.stdout: Any = None
        self.stderr: Any = None
        self._status: ExitStatus | None = None
        self.ready: wire.Ready | None = None
        #: Seconds from :func:`launch` until the child reported ready.
        self.ready_seconds: float | None = None

    def __repr__(self) -> str:
        return f"<Child {self.role} pid={self.pid} method={self.method}>"

    @property
    def _handle(self) -> Any:
        """The psutil handle on the child, taken the first time it is needed.

        Taken then, not at launch, to keep it off the path to a ready child; it is
        still safe: a fork or spawn child's pid stays ours until we reap it, and
        :meth:`wait_ready` takes it while a forkserver child is known to be alive.
        """
        if not self._handle_taken:
            self._handle_value = self._platform.handle(self.pid)
            self._handle_taken = True
        return self._handle_value

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def describe(self) -> str:
        return f"child process {self.role!r} (pid {self.pid}, {self.method})"

    @property
    def launched_at(self) -> float:
        """When :func:`~spawnflow.bootstrap.launcher.launch` was called (perf_counter)."""
        return self._launched_at

    @property
    def boot_timeout(self) -> float:
        """Seconds from launch to Ready: ``[core] child_boot_timeout`` of its settings."""
        return (self.spec.settings or settings_module.current()).core.child_boot_timeout

    def wait_ready(self, timeout: float | None = None) -> wire.Ready:
        """Wait for the child's Ready; ChildBootError if it failed or exited first, or
        did not boot within ``timeout`` (:attr:`boot_timeout` by default)."""
        if self.ready is not None:
            return self.ready
        from multiprocessing.connection import wait

        timeout = self.boot_timeout if timeout is None else timeout
        if not wait([self.channel.connection, self.sentinel], timeout):
            raise self.boot_too_slow(time.perf_counter() - self._launched_at, timeout)
        return self.accept_boot_message()

    def accept_boot_message(self) -> wire.Ready:
        """Take the child's first message, once its channel or sentinel is ready: its
        Ready, or ChildBootError saying why it could not boot."""
        if self.ready is not None:
            return self.ready
        message = None
        if self.channel.connection.poll():
            try:
                message = self.channel.recv()
            except (EOFError, OSError):
                message = None
        if isinstance(message, wire.Ready):
            self.ready, self.ready_seconds = message, time.perf_counter() - self._launched_at
            self._handle  # noqa: B018 - take it while the child is known to be alive
            return message
        status = self.join(timeout=30)
        if isinstance(message, wire.BootFailed):
            raise ChildBootError(
                f"{self.describe()} could not boot ({message.stage}): {message.message}."
            )
        ended = status.describe(meaning=False) if status else "closed its connection"
        raise ChildBootError(
            f"{self.describe()} {ended} before it was ready; its stderr may say why."
        )

    def boot_too_slow(self, seconds: float, limit: float) -> ChildBootError:
        """The error for a child still booting ``seconds`` after its launch."""
        return ChildBootError(
            f"{self.describe()} was still booting {seconds:.1f} s after its launch, past "
            f"its boot budget ({limit:g} s, [core] child_boot_timeout): starting an "
            f"interpreter and importing under {self.method} took that long"
        )

    def is_alive(self) -> bool:
        return self._status is None and not self._has_exited()

    def _has_exited(self, timeout: float = 0.0) -> bool:
        """Whether the child exited, waiting up to ``timeout``, without reaping it.

        The sentinel fires when every copy of the child's end of its pipe is closed;
        a fork grandchild inherits a copy, so the sentinel alone can stay silent
        after the child exited: the handle says so too.
        """
        from multiprocessing.connection import wait

        deadline = time.monotonic() + timeout
        while True:
            if wait([self.sentinel], min(max(deadline - time.monotonic(), 0), 0.25)):
                return True
            if self._platform.has_exited(self._handle):
                return True
            if time.monotonic() >= deadline:
                return False

    @property
    def exit_status(self) -> ExitStatus | None:
        """How the child ended, once it has been reaped (by :meth:`join` or :meth:`stop`)."""
        return self._status

    def join(self, timeout: float | None = None) -> ExitStatus | None:
        """Wait for the child to exit; its ExitStatus, or None if it is still running.

        Whatever the child left behind in its process group (a background job of a
        shell command, say) is killed before the child is reaped.
        """
        if self._status is None:
            if not self._has_exited(timeout if timeout is not None else float("inf")):
                return None
            self._reap()
        return self._status

    def stop(self, grace: float | None = None) -> ExitStatus:
        """Stop the child's whole tree: warm, then cold after ``grace`` seconds (law 7).

        A warm stop is SIGTERM to the child's process group, or to the child alone if
        its spec says so (the control pipe where there are no signals). Descendants
        are recorded while waiting, because a grandchild that outlives its parent is
        re-parented and no longer findable from the child; whatever of the tree is
        alive when the child exits or the grace period ends is killed. Inside a child
        that is itself stopping, a second stop request ends the wait at once. A grace
        of 0 is a cold stop: the child is not asked first, so it cannot act on a
        request it would have no time to finish (a try recorded as failed by a worker
        that was being killed, say).
        """
        if self._status is not None:
            return self._status
        if grace is None:
            grace = (self.spec.settings or settings_module.current()).core.stop_grace_period
        cold = False
        tree = []
        if not self._has_exited():
            tree = self._tree()
            if grace <= 0:
                self._platform.kill_tree(tree)
                return self._reap(cold=True)
            self.request_warm_stop()
            deadline = time.monotonic() + grace
            exited = False
            while not exited and (remaining := deadline - time.monotonic()) > 0:
                if lifecycle.now_requested():
                    break
                exited = self._has_exited(min(remaining, 0.25))
                if not exited:
                    tree = _merge(tree, self._tree())
            cold = not exited
        self._platform.kill_tree(tree)
        return self._reap(cold=cold)

    def _tree(self) -> list:
        """The child and its live descendants, with what they launched through servers
        forked from the forkservers of the tree (no descendants in the OS tree)."""
        return forkservers.tree(self._platform.snapshot_tree(self._handle))

    def request_warm_stop(self) -> None:
        """Ask the child to stop (see :meth:`stop`) without waiting for it."""
        self._platform.request_warm_stop(
            self._handle, self._control, group=self.spec.warm_stop_group
        )

    def _reap(self, cold: bool = False) -> ExitStatus:
        self._platform.kill_group(self.pid, self._handle)
        # ``is_alive`` reaps an exited child without waiting on its sentinel, which a
        # fork grandchild may hold open; ``join`` then returns at once.
        self._process.is_alive()
        self._process.join(timeout=30)
        exitcode = self._process.exitcode
        status = self._status = ExitStatus(exitcode, self._platform.signal_name(exitcode), cold)
        _children.pop(self.pid, None)
        self._close_connections()
        self._process.close()
        return status

    def _close_connections(self) -> None:
        for connection in (self.channel, self._control, self.stdout, self.stderr):
            if connection is not None:
                connection.close()


def _merge(known: list, fresh: list) -> list:
    pids = {p.pid for p in known}
    return known + [p for p in fresh if p.pid not in pids]


#: Children this process launched and has not reaped, by pid.
_children: dict[int, Child] = {}


def register(child: Child) -> None:
    _children[child.pid] = child


def children() -> list[Child]:
    """The children this process launched and has not reaped yet."""
    return list(_children.values())


def stop_children(grace: float | None = None) -> None:
    """Stop every child this process launched that is still running, with their trees."""
    with lifecycle.unwinding():
        stop_many(children(), grace, whole_tree=True)


def stop_many(group: list[Child], grace: float | None = None, *, whole_tree: bool = False) -> None:
    """Stop several children at once: warm stops to all, one grace period, then cold.

    Stopping them one after the other would let N stubborn children take N grace
    periods. A grace of 0 kills them without asking, as :meth:`Child.stop` does.
    ``whole_tree``: the group is every child this process runs, and the cold stop
    also takes what the forkservers this process shares forked for them (children of
    those servers, not of their launchers, which a walk of each child's tree misses).
    All that is killed goes in one sweep, every process stopped before any dies.
    """
    group = [child for child in group if child.exit_status is None]
    # Our other children, which this stop leaves alone, even where our servers forked them.
    others = [pid for pid, child in _children.items() if child not in group]
    if not group:
        if whole_tree:
            platforms.current().kill_tree(forkservers.forked(skip=others))
        return
    platform = group[0]._platform
    if grace is None:
        grace = (group[0].spec.settings or settings_module.current()).core.stop_grace_period
    trees = {}
    for child in group:
        if not child._has_exited():
            trees[child] = child._tree()
            if grace > 0:
                child.request_warm_stop()
    deadline = time.monotonic() + grace
    waiting = [child for child in trees if not child._has_exited()]
    while waiting and time.monotonic() < deadline and not lifecycle.now_requested():
        for child in list(waiting):
            if child._has_exited(0.05):
                waiting.remove(child)
            else:
                trees[child] = _merge(trees[child], child._tree())
    leftovers = [process for tree in trees.values() for process in tree]
    if whole_tree:
        leftovers += forkservers.forked(skip=others)
    platform.kill_tree(leftovers)
    for child in group:
        child._reap(cold=child in waiting)


def _after_fork_in_child() -> None:
    """A fork child inherits its parent's children list and their pipe ends: drop both.

    They are its siblings, not its children; and an end kept open here would hide
    a sibling's death (no EOF) or its parent's (no EOF on the control pipe).
    """
    for sibling in _children.values():
        try:
            sibling._close_connections()
        except OSError:
            pass
    _children.clear()


platforms.at_fork_in_child(_after_fork_in_child)
