"""The one place that starts child processes (law 1).

:func:`launch` starts a child described by a :class:`ChildSpec` under an explicit
start method and returns a :class:`Child`. Under every method the child enters
through :func:`_child_entry`, which, in this order: installs the parent's
settings snapshot, configures logging for the child's role, puts the child in its
own process group and installs its warm-stop handling, imports the target named by
the spec's import string, reports :class:`~spawnflow.bootstrap.wire.Ready` and
calls the target. Nothing else is set up in a child: no settings reload, no ORM,
no migrations.

The spec is pickled under every method, fork included, so a spec that could not
reach a spawned child fails under fork too, in the parent, at launch. A spawn or
forkserver child unpickles those bytes; a fork child already holds a copy of the
spec object in its copied memory and uses that (unpickling it again would only
cost time), so every child sees a copy, never a shared object.
"""

from __future__ import annotations

import datetime as dt
import enum
import importlib
import os
import pickle
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from typing import Any

import msgspec

from spawnflow.bootstrap import lifecycle, logs, startmethods, wire
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings

_ROLE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_PLAIN_SCALARS = (
    type(None), bool, int, float, str, bytes, PurePath, dt.date, dt.time, dt.timedelta,
    enum.Enum, msgspec.Struct,
)  # fmt: skip


class ChildBootError(UserError, RuntimeError):
    """A child exited, or never reported, before it was ready; the message is one sentence."""


class ChildSpec(msgspec.Struct, frozen=True):
    """The picklable description of a child: what it is, what it runs, what it knows.

    Args:
        role: what the process is for (``dag-processor``, ``file-parser``, ...); names
            its log file and process name.
        target: ``"package.module:function"``; called as ``function(channel, **kwargs)``.
        kwargs: plain data only (strings, numbers, paths, ids, lists and dicts of
            them): references cross the process boundary, live resources do not (law 5).
        settings: the snapshot the child runs with; the parent's installed one if None.
        log_file: JSON-lines file; ``<base_log_folder>/<role>.log`` if None.
        log_to_console: also write the child's log lines to its stderr.

    Raises:
        ValueError: for a malformed role or target.
        TypeError: for a keyword argument that is not plain data.
    """

    role: str
    target: str
    kwargs: Mapping[str, Any] = msgspec.field(default_factory=dict)
    settings: Settings | None = None
    log_file: Path | None = None
    log_to_console: bool = False

    def __post_init__(self) -> None:
        if not _ROLE.match(self.role):
            raise ValueError(f"role {self.role!r} must be lowercase words joined by '-'")
        if not _TARGET.match(self.target):
            raise ValueError(f"target {self.target!r} must be an import string 'module:function'")
        for name, value in self.kwargs.items():
            _require_plain(value, f"ChildSpec.kwargs[{name!r}]")


def _require_plain(value: Any, where: str) -> None:
    if isinstance(value, _PLAIN_SCALARS):
        return
    if isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            _require_plain(item, f"{where}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _require_plain(key, f"{where} key")
            _require_plain(item, f"{where}[{key!r}]")
        return
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    raise TypeError(
        f"{where} is a {kind}; only plain data (strings, numbers, paths, ids, and lists or "
        "dicts of them) may cross into a child: pass a reference such as a URL, a path or an id"
    )


class ExitStatus(msgspec.Struct, frozen=True):
    """How a child ended: its exit code, or the signal that killed it."""

    exitcode: int | None
    signal: str | None = None
    #: The child had to be killed because it outlived its warm stop's grace period.
    cold: bool = False

    def describe(self, meaning: bool = True) -> str:
        """``killed by SIGKILL``, ``exited with code 3 (boot failed)``, ...

        ``meaning=False`` leaves out what spawnflow's exit codes mean, for a child
        that ended before spawnflow's entry point ran (the codes were not ours).
        """
        if self.signal is not None:
            return f"killed by {self.signal}"
        said = lifecycle.EXIT_MEANINGS.get(self.exitcode) if meaning else None
        return f"exited with code {self.exitcode}" + (f" ({said})" if said else "")


class Child:
    """A launched child: its pid, sentinel and channel, and how to stop it."""

    def __init__(self, process, spec: ChildSpec, method: str, channel: wire.Channel, control):
        self._process = process
        self.spec = spec
        self.role = spec.role
        self.method = method
        self.pid: int = process.pid
        #: Becomes ready (for ``multiprocess.connection.wait``) when the child exits.
        self.sentinel = process.sentinel
        #: The parent's end of the wire-protocol connection.
        self.channel = channel
        self._control = control
        self._platform = platforms.current()
        self._launched_at = time.perf_counter()
        self._status: ExitStatus | None = None
        self.ready: wire.Ready | None = None
        #: Seconds from :func:`launch` until the child reported ready.
        self.ready_seconds: float | None = None

    def __repr__(self) -> str:
        return f"<Child {self.role} pid={self.pid} method={self.method}>"

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def describe(self) -> str:
        return f"child process {self.role!r} (pid {self.pid}, {self.method})"

    def wait_ready(self, timeout: float = 60.0) -> wire.Ready:
        """Wait for the child's Ready; ChildBootError if it failed or exited first."""
        if self.ready is not None:
            return self.ready
        from multiprocess.connection import wait

        connection = self.channel.connection
        if not wait([connection, self.sentinel], timeout):
            raise ChildBootError(f"{self.describe()} did not report ready within {timeout:g} s.")
        message = None
        if connection.poll():
            try:
                message = self.channel.recv()
            except (EOFError, OSError):
                message = None
        if isinstance(message, wire.Ready):
            self.ready, self.ready_seconds = message, time.perf_counter() - self._launched_at
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

    def is_alive(self) -> bool:
        return self._status is None and not self._has_exited()

    def _has_exited(self, timeout: float = 0.0) -> bool:
        """Whether the child exited, waiting up to ``timeout``, without reaping it.

        The sentinel fires when every copy of the child's end of its pipe is closed;
        a fork grandchild inherits a copy, so the sentinel alone can stay silent
        after the child exited. An exited child that is not reaped yet is a zombie,
        which the OS reports too. Not reaping matters: until we do, the child's pid,
        which is also its process group's id, cannot be reused (see :meth:`_reap`).
        """
        from multiprocess.connection import wait

        deadline = time.monotonic() + timeout
        while True:
            if wait([self.sentinel], min(max(deadline - time.monotonic(), 0), 0.25)):
                return True
            if self._platform.has_exited(self.pid):
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

        A warm stop is SIGTERM to the child's process group (the control pipe where
        there are no signals). Descendants are recorded while waiting, because a
        grandchild that outlives its parent is re-parented and no longer findable
        from the child; whatever of the tree is alive when the child exits or the
        grace period ends is killed.
        """
        if self._status is not None:
            return self._status
        if grace is None:
            grace = (self.spec.settings or settings_module.current()).core.stop_grace_period
        tree = self._platform.snapshot_tree(self.pid)
        cold = False
        if not self._has_exited():
            self._platform.request_warm_stop(self.pid, self._control)
            deadline = time.monotonic() + grace
            exited = False
            while not exited and (remaining := deadline - time.monotonic()) > 0:
                exited = self._has_exited(min(remaining, 0.25))
                if not exited:
                    tree = _merge(tree, self._platform.snapshot_tree(self.pid))
            cold = not exited
        self._platform.kill_tree(tree)
        self._reap(cold=cold)
        return self._status

    def _reap(self, cold: bool = False) -> None:
        # The child has exited but is not reaped, so no other process can hold its
        # pid yet; killing that process group now reaches only what the child left.
        # (A forkserver child is reaped by the forkserver at once; its pid could in
        # principle be reused in between, which needs the pid space to wrap around
        # within these few milliseconds.)
        self._platform.kill_group(self.pid)
        self._process.join(timeout=30)
        exitcode = self._process.exitcode
        self._status = ExitStatus(exitcode, self._platform.signal_name(exitcode), cold)
        _children.pop(self.pid, None)
        for connection in (self.channel, self._control):
            if connection is not None:
                connection.close()
        self._process.close()


def _merge(known: list, fresh: list) -> list:
    pids = {p.pid for p in known}
    return known + [p for p in fresh if p.pid not in pids]


# -- launching ------------------------------------------------------------------------

#: Children this process launched and has not reaped, by pid.
_children: dict[int, Child] = {}
# A fork child inherits the dict but not the children: they are its siblings.
os.register_at_fork(after_in_child=_children.clear)


def launch(spec: ChildSpec, *, method: str | None = None, component: str | None = None) -> Child:
    """Start the child that ``spec`` describes and return at once.

    The start method is ``method`` if given, else the one configured for
    ``component`` (``[component] mp_start_method``), else ``[core] mp_start_method``.
    Call :meth:`Child.wait_ready` to wait for it to boot.
    """
    started = time.perf_counter()
    snapshot = spec.settings or settings_module.current()
    if method is None:
        method, _ = startmethods.for_component(snapshot, component)
    log_file = spec.log_file or logs.role_log_file(snapshot.logging.base_log_folder, spec.role)
    _ensure_folder(log_file.parent)
    spec = ChildSpec(
        role=spec.role,
        target=spec.target,
        kwargs=dict(spec.kwargs),
        settings=snapshot,
        log_file=log_file,
        log_to_console=spec.log_to_console,
    )
    ctx = startmethods.context(method)
    _stop_children_at_exit()
    parent_end, child_end = ctx.Pipe(duplex=True)
    control_parent = control_child = None
    if not platforms.current().stop_by_signal:
        control_child, control_parent = ctx.Pipe(duplex=False)
    pickled = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    process = ctx.Process(
        target=_child_entry,
        args=(
            spec if method == "fork" else pickled,
            method,
            child_end,
            control_child,
        ),
        name=f"spawnflow-{spec.role}",
        daemon=False,
    )
    try:
        process.start()
    finally:
        # The child holds its own copies now (or never started): closing ours lets
        # us see EOF when it dies.
        child_end.close()
        if control_child is not None:
            control_child.close()
        if process.pid is None:
            parent_end.close()
            if control_parent is not None:
                control_parent.close()
    child = Child(process, spec, method, wire.Channel(parent_end), control_parent)
    child._launched_at = started
    _children[child.pid] = child
    return child


_atexit_registered = False
_folders: set[Path] = set()


def _ensure_folder(folder: Path) -> None:
    """Create a children's log folder once per parent, instead of once per child."""
    if folder not in _folders:
        folder.mkdir(parents=True, exist_ok=True)
        _folders.add(folder)


def _stop_children_at_exit() -> None:
    """Stop leftover children when the interpreter exits, however it exits.

    Registered after ``multiprocess`` is imported: atexit runs handlers last-in
    first-out, and multiprocess's own handler joins every child, which would wait
    forever for a child that waits to be stopped.
    """
    global _atexit_registered
    if not _atexit_registered:
        import atexit

        atexit.register(stop_children)
        _atexit_registered = True


def children() -> list[Child]:
    """The children this process launched and has not reaped yet."""
    return list(_children.values())


def stop_children(grace: float | None = None) -> None:
    """Stop every child this process launched that is still running."""
    for child in children():
        child.stop(grace)


def import_target(reference: str) -> Callable[..., Any]:
    """The callable named by ``"module:attribute"``; ImportError saying what failed."""
    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ImportError(f"cannot import target {reference!r}: {error}") from error
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ImportError(
                f"cannot import target {reference!r}: {module_name} has no attribute {attribute!r}"
            ) from None
    if not callable(target):
        raise ImportError(f"target {reference!r} is not callable")
    return target


# -- in the child ---------------------------------------------------------------------


def _child_entry(spec: ChildSpec | bytes, method: str, connection: Any, control: Any) -> None:
    """Where every child starts, under every start method."""
    started = time.perf_counter()
    channel = wire.Channel(connection)
    stage, role = "spec", "unknown"
    try:
        if isinstance(spec, bytes):
            spec = pickle.loads(spec)
        role = spec.role
        stage = "settings"
        settings_module.install(spec.settings)
        stage = "logging"
        logs.configure(
            spec.role,
            level=spec.settings.logging.level,
            log_file=spec.log_file,
            console=spec.log_to_console,
            create_folder=False,  # the launcher made it: a fork child pays for every syscall
        )
        stage = "process group"
        platforms.current().enter_own_process_group()
        lifecycle.install(control)
        stage = "target import"
        target = import_target(spec.target)
    except lifecycle.WarmStop:
        raise  # asked to stop before it was ready: not a boot failure
    except BaseException as error:  # noqa: BLE001 - a boot failure of any kind is reported
        message = str(error) or type(error).__name__
        channel.send(wire.BootFailed(
            pid=os.getpid(), role=role, stage=stage, error=type(error).__name__, message=message
        ))  # fmt: skip
        sys.exit(lifecycle.EXIT_BOOT_FAILED)

    channel.send(wire.Ready(
        pid=os.getpid(), role=role, method=method, boot_seconds=time.perf_counter() - started
    ))  # fmt: skip
    log = logs.get_logger("spawnflow.launcher")
    try:
        target(channel, **spec.kwargs)
    except Exception:
        log.exception("target failed", target=spec.target)
        sys.exit(lifecycle.EXIT_TARGET_FAILED)
    finally:
        # No orphan survives its supervisor (law 7), however the target ended.
        try:
            stop_children()
        except Exception:
            log.exception("stopping children failed")
