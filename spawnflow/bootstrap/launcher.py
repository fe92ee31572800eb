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
forkserver child is sent those bytes compressed and unpickles them; a fork child
already holds a copy of the spec object in its copied memory and uses that
(unpickling it again would only cost time), so every child sees a copy, never a
shared object.
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
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from typing import Any

import msgspec

from spawnflow.bootstrap import forkservers, lifecycle, logs, startmethods, wire
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.child import (
    Child,
    ChildBootError,
    ExitStatus,
    children,
    register,
    stop_children,
)
from spawnflow.bootstrap.settings import Settings

__all__ = [
    "Child",
    "ChildBootError",
    "ChildSpec",
    "ExitStatus",
    "children",
    "import_target",
    "launch",
    "stop_children",
]

_ROLE = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_PLAIN_SCALARS = (
    type(None), bool, int, float, str, bytes, PurePath, dt.date, dt.time, dt.timedelta,
    enum.Enum, msgspec.Struct,
)  # fmt: skip


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
        console_level: the lowest level of those lines (the log file's if None).
        capture_output: send the child's stdout and stderr (file descriptors 1 and 2,
            so subprocesses' and C code's output too) to pipes the parent reads from
            :attr:`Child.stdout` and :attr:`Child.stderr`.
        warm_stop_group: the child runs user code: a warm stop signals its whole
            process group (a task's shell commands get SIGTERM too), and on Windows a
            kill-on-close job holds its tree. False for spawnflow's own components,
            which stop their children themselves, and whose group holds their
            forkserver, which must outlive the warm stop.
        kill_with_parent: if the parent dies, the child dies at once with its tree
            (the kernel's SIGKILL on Linux; elsewhere the child does it when its control
            pipe reports the death) instead of stopping warm: for user code, which may
            ignore SIGTERM and must not outlive its supervisor.

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
    console_level: str | None = None
    capture_output: bool = False
    warm_stop_group: bool = True
    kill_with_parent: bool = False

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


def launch(spec: ChildSpec, *, method: str | None = None, share_forkservers: bool = False) -> Child:
    """Start the child that ``spec`` describes and return at once.

    The start method is ``method`` if given, else the one configured for the spec's
    role (``[component] mp_start_method`` of the component the role belongs to, see
    :data:`~spawnflow.bootstrap.startmethods.ROLE_COMPONENTS`, else
    ``[core] mp_start_method``). Watch it (:mod:`spawnflow.bootstrap.watch`) or call
    :meth:`Child.wait_ready` to wait for it to boot. ``share_forkservers``: the child's
    tree forks from the forkservers this process shares
    (:func:`~spawnflow.bootstrap.forkservers.share`).
    """
    started = time.perf_counter()
    snapshot = spec.settings or settings_module.current()
    if method is None:
        method, _ = startmethods.for_role(snapshot, spec.role)
    log_file = spec.log_file or logs.role_log_file(snapshot.logging.base_log_folder, spec.role)
    _ensure_folder(log_file.parent)
    spec = msgspec.structs.replace(
        spec, kwargs=dict(spec.kwargs), settings=snapshot, log_file=log_file
    )
    ctx = startmethods.context(method)
    _stop_children_at_exit()
    parent_end, child_end = ctx.Pipe(duplex=True)
    control_parent = control_child = None
    platform = platforms.current()
    if platform.control_pipe:
        control_child, control_parent = ctx.Pipe(duplex=False)
    readers, writers = ((), ())
    if spec.capture_output:
        pairs = [ctx.Pipe(duplex=False) for _ in range(2)]
        readers, writers = tuple(r for r, _ in pairs), tuple(w for _, w in pairs)
    pickled = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    if method != "fork":
        # Windows' spawn writes what the child needs into a pipe after CreateProcess, and
        # WriteFile waits for the child to read whatever does not fit the pipe's buffer:
        # our launch would last the child's whole interpreter start (with Ctrl-C held
        # off meanwhile, see Platform.launching). The settings make most of a spec and
        # compress to 2/5: a task's payload fits a 4 KiB buffer with default settings.
        # POSIX pipes hold 16-64 KiB; compressing there too keeps one path, the one
        # tested on every OS (a child pays ~0.7 ms to load zlib).
        pickled = zlib.compress(pickled, 1)
    if method == "fork" and platform.parent_death_signal:
        platforms.libc()  # opened once here, so that no fork child pays for dlopen
    # A fork child inherits our ends of its own pipes too; it must close them, or it
    # would never see EOF when we die. Other methods pass only the child's ends.
    ours = (parent_end, control_parent, *readers) if method == "fork" else ()
    process = startmethods.process_class(method, ctx)(
        target=_child_entry,
        args=(
            spec if method == "fork" else pickled,
            method,
            child_end,
            control_child,
            os.getpid(),
            ours,
            writers,
            forkservers.handed_down(share_forkservers),
        ),
        name=f"{startmethods.CHILD_NAME_PREFIX}{spec.role}",
        daemon=False,
    )
    try:
        if method == "forkserver":
            exec_follows = forkservers.starts_by_exec(spec.role)
            with platform.launching(exec_follows), forkservers.launching_through(spec.role):
                process.start()
        else:
            with platform.launching(exec_follows=method == "spawn"):
                process.start()
        platform.adopt_into_own_group(process.pid)
    finally:
        # The child holds its own copies now (or never started): closing ours lets
        # us see EOF when it dies.
        for end in (child_end, control_child, *writers):
            if end is not None:
                end.close()
        if process.pid is None:
            for end in (parent_end, control_parent, *readers):
                if end is not None:
                    end.close()
    child = Child(process, spec, method, wire.Channel(parent_end), control_parent, started)
    if readers:
        child.stdout, child.stderr = readers
    register(child)
    return child


_at_exit: Any = None
_folders: set[Path] = set()


def _ensure_folder(folder: Path) -> None:
    """Create a children's log folder once per parent, instead of once per child.

    One that cannot be made is the child's to report: its boot fails with the one
    sentence of :class:`~spawnflow.bootstrap.logfiles.LogFileUnwritable`.
    """
    if folder not in _folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        _folders.add(folder)


def _stop_children_at_exit() -> None:
    """Stop leftover children when the interpreter exits, however it exits.

    As one of multiprocessing's own exit finalizers: its exit handler runs those first and
    then joins every child it knows, which would wait forever for a child that waits to
    be stopped. An atexit hook of ours could run after that handler (atexit runs last
    in, first out, and multiprocessing registers its handler again when its logger is
    first made), and the script would hang at exit. A fork child starts with no
    finalizers (multiprocessing clears them), hence the check that ours is still there.
    """
    global _at_exit
    if _at_exit is None or not _at_exit.still_active():
        from multiprocessing import util

        _at_exit = util.Finalize(None, stop_children, exitpriority=100)


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


#: This child's own connections to its parent; a fork grandchild must not keep them.
_upward: list[Any] = []


def _close_upward_after_fork() -> None:
    for connection in _upward:
        try:
            connection.close()
        except OSError:
            pass
    _upward.clear()


platforms.at_fork_in_child(_close_upward_after_fork)


def _child_entry(
    spec: ChildSpec | bytes,
    method: str,
    connection: Any,
    control: Any,
    parent_pid: int,
    parents_ends: tuple = (),
    output: tuple = (),
    servers: tuple = (),
) -> None:
    """Where every child starts, under every start method."""
    started = time.perf_counter()
    for end in parents_ends:
        if end is not None:
            end.close()
    if output:
        # Before anything else can print: what the child writes goes to its parent.
        platforms.current().redirect_output(*output)
    if method == "forkserver":
        startmethods.release_forkserver()
    forkservers.adopt(servers)
    _upward.extend(c for c in (connection, control) if c is not None)
    channel = wire.Channel(connection)
    stage, role = "spec", "unknown"
    try:
        child_spec: ChildSpec = (
            pickle.loads(zlib.decompress(spec)) if isinstance(spec, bytes) else spec
        )
        role = child_spec.role
        stage = "settings"
        snapshot = child_spec.settings
        assert snapshot is not None, "launch() always fills in the settings"
        settings_module.install(snapshot)
        stage = "logging"
        logs.configure(
            child_spec.role,
            level=snapshot.logging.level,
            log_file=child_spec.log_file,
            console=child_spec.log_to_console,
            console_level=child_spec.console_level,
            create_folder=False,  # the launcher made it: a fork child pays for every syscall
        )
        stage = "process group"
        platform = platforms.current()
        platform.name_process(role)
        platform.enter_own_process_group()
        if child_spec.warm_stop_group:
            platform.contain_tree()  # user code: its whole tree ends with it (Windows)
        lifecycle.install(
            control, platform, child=True, orphan_grace=snapshot.core.stop_grace_period,
            kill_with_parent=child_spec.kill_with_parent,
        )  # fmt: skip
        if not platform.stop_when_parent_dies(parent_pid, kill=child_spec.kill_with_parent):
            raise lifecycle.WarmStop()  # the parent died while we booted
        stage = "target import"
        target = import_target(child_spec.target)
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
    try:
        target(channel, **child_spec.kwargs)
    except Exception:  # noqa: BLE001 - logged with its traceback, then a named exit code
        _log().exception("target failed", target=child_spec.target)
        sys.exit(lifecycle.EXIT_TARGET_FAILED)
    finally:
        # No orphan survives its supervisor (law 7), however the target ended. A
        # second stop request meanwhile makes this stop cold instead of unwinding it.
        lifecycle.exiting()
        try:
            stop_children()
        except BaseException:  # noqa: BLE001 - logged; the exit must not be blocked
            _log().exception("stopping children failed")


def _log():
    return logs.get_logger("spawnflow.launcher")
