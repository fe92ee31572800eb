"""Windows or macOS, simulated on Linux in every process of a test run.

``SPAWNFLOW_TEST_SIMULATE_OS=windows|macos`` with this folder on ``PYTHONPATH``
(``sitecustomize.py`` here calls :func:`activate` at interpreter start-up, so spawned
children, the forkserver and every ``python -m spawnflow`` a test starts are
simulated too, not only the test process) makes each process look like that OS to
spawnflow and to the standard library where spawnflow's behaviour depends on it.
Neither simulated OS has ``/proc``: ``open("/proc/self/...")`` fails in every process.

Windows:
  * spawnflow's platform is ``WINDOWS``: spawn only, no process groups, warm stops
    and the parent's death travel on the control pipe;
  * ``os`` has no ``register_at_fork``, ``fork``, process groups or sessions;
    ``signal`` has no ``pthread_kill``, ``pthread_sigmask``, alarms or timers, and
    gains ``SIGBREAK`` (Ctrl-Break; SIGUSR2 underneath, which also terminates
    by default); the standard library's ``resource``, ``fcntl`` and ``termios``
    cannot be imported (a user's ``resource.py`` on ``sys.path`` still can);
  * ``multiprocessing`` and ``multiprocess`` offer only spawn;
  * ``os.kill`` with any signal but 0 terminates the process, as
    ``TerminateProcess`` does; a process killed by a signal reports an exit code,
    not a signal: 15 for SIGKILL and SIGTERM (what psutil's ``kill()`` and
    ``os.kill(pid, SIGTERM)`` give on Windows), 0xC000013A for SIGINT, 0xC0000005
    for SIGSEGV, 3 for SIGABRT;
  * ``signal.raise_signal`` from a thread other than the main one runs the
    handler in the main thread at its next bytecode, as Windows does: only
    ``time.sleep`` and the multiprocessing connection waits (which watch the
    interpreter's SIGINT event there) end early; a blocking pipe read, a lock or a
    ``threading.Event`` wait does not; a multiprocessing wait on more than 63
    objects in the main thread (64 elsewhere) raises ValueError, as
    ``WaitForMultipleObjects`` does under Python 3.11 and 3.12;
  * a console's Ctrl-C reaches every process attached to it: since no process
    moves to a group of its own here, a SIGINT sent to the group a test started
    reaches the whole tree (:func:`console_interrupt`);
  * a process born ignoring the console's Ctrl-C starts every program ignoring it
    too, as Windows' inherited flag does whatever handler the process installed
    since (a SIGINT ignored from birth stands in for that flag here, and a handler
    installed later would otherwise hand an exec'd program SIGINT's default).

macOS:
  * spawnflow's platform is ``MACOS``: spawn by default, no parent-death signal;
  * an AF_UNIX socket path longer than 103 bytes is refused with
    ``OSError: AF_UNIX path too long`` (``sun_path`` is 104 bytes there);
  * the standard library's ``multiprocessing`` defaults to spawn; ``os`` has no
    ``sched_getaffinity``, ``pidfd_open``, ``memfd_create`` or ``eventfd``.

What it cannot stand in for: the kernels themselves (processes are still created
by Linux's fork and exec; pipes are POSIX pipes, not Windows named pipes in
message mode; there are no job objects, no console control handlers, no
``msvcrt``, no ``/proc``-less macOS, no kqueue); Windows path rules (length,
reserved names, case-insensitive file systems); the Objective-C runtime's fork
checks. Those code paths are type-checked per OS (``mypy --platform win32`` and
``darwin``) and run on the GitHub macOS and Windows runners.
"""

from __future__ import annotations

import _thread
import importlib.abc
import importlib.machinery
import os
import signal
import sys
import threading
import time
import types
from typing import Any

NAMES = ("windows", "macos")
#: How long a simulated interruptible wait blocks before the main thread looks for a
#: pending signal handler again.
SLICE = 0.02

#: The functions this module hides or replaces, for code that must act as the OS
#: itself would (a console delivering Ctrl-C to a process group, say).
real = types.SimpleNamespace(
    kill=os.kill,
    killpg=os.killpg,
    raise_signal=signal.raise_signal,
    sleep=time.sleep,
    waitstatus_to_exitcode=os.waitstatus_to_exitcode,
)
#: The OS being simulated in this process, or None.
active: str | None = None

_WINDOWS_MISSING = {
    os: ("register_at_fork", "fork", "forkpty", "setpgid", "setpgrp", "getpgid", "getpgrp",
         "killpg", "setsid", "getsid", "tcgetpgrp", "tcsetpgrp"),
    signal: ("pthread_kill", "pthread_sigmask", "sigpending", "sigwait", "sigwaitinfo",
             "sigtimedwait", "alarm", "pause", "setitimer", "getitimer", "siginterrupt",
             "SIGALRM"),
}  # fmt: skip
_MACOS_MISSING = {os: ("sched_getaffinity", "sched_setaffinity", "pidfd_open", "memfd_create",
                       "eventfd")}  # fmt: skip
_WINDOWS_HIDDEN_MODULES = ("resource", "fcntl", "termios")
#: What a process killed by a signal here would have reported on Windows.
_WINDOWS_EXIT_CODES = {
    signal.SIGKILL: 15,
    signal.SIGTERM: 15,
    signal.SIGINT: 0xC000013A,
    signal.SIGSEGV: 0xC0000005,
    signal.SIGABRT: 3,
}
_WINDOWS_WAIT_LIMIT = 64  # MAXIMUM_WAIT_OBJECTS; the main thread's SIGINT event takes one
_MACOS_SUN_PATH = 103


def activate(name: str) -> None:
    """Simulate ``name`` (``windows`` or ``macos``) in this process from now on."""
    global active
    if name not in NAMES:
        raise SystemExit(f"SPAWNFLOW_TEST_SIMULATE_OS={name!r}: choose one of {', '.join(NAMES)}")
    if active is not None:
        return
    active = name
    hooks = _AfterImport()
    if name == "windows":
        _remove(_WINDOWS_MISSING)
        os.kill = _terminate_like_windows
        os.waitstatus_to_exitcode = _exit_code_like_windows
        signal.raise_signal = _raise_like_windows
        signal.SIGBREAK = signal.SIGUSR2  # type: ignore[attr-defined]
        time.sleep = _interruptible_sleep
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            hooks.add("subprocess", _programs_born_ignoring_ctrl_c)
        for package in ("multiprocess", "multiprocessing"):
            hooks.add(f"{package}.context", _spawn_only)
            hooks.add(f"{package}.connection", _windows_waits)
        sys.meta_path.insert(0, _HiddenStdlib(_WINDOWS_HIDDEN_MODULES))
    else:
        _remove(_MACOS_MISSING)
        hooks.add("multiprocessing.context", _spawn_by_default)
        hooks.add("socket", _short_unix_paths)
    _hide_proc_self()
    sys.meta_path.insert(0, hooks)
    # spawnflow's platform is set now, not when it is first imported: pytest's assertion
    # rewriter (which marks spawnflow for rewriting, as the distribution of a pytest11
    # plugin) sits ahead of every finder and loads spawnflow's modules itself, so a hook
    # on their import would never see them. Last: what it imports sees the OS simulated.
    from spawnflow.bootstrap import platform as platforms

    platforms.use(platforms.by_name({"windows": "windows", "macos": "darwin"}[name]))


def console_interrupt(pgid: int, signum: int = signal.SIGINT) -> None:
    """Deliver a console's Ctrl-C (or ``signum``) to every process of group ``pgid``.

    The group a test started with ``start_new_session``: on Linux and macOS only its
    leader is still in it (spawnflow's children lead groups of their own); under the
    Windows simulation the whole tree is, as every process attached to a console is.
    """
    real.killpg(pgid, signum)


def _hide_proc_self() -> None:
    """Neither Windows nor macOS has ``/proc``: this process cannot read its own entry.

    Only ``/proc/self``: psutil reads ``/proc/<pid>`` for every process it looks at, and
    it stands in for what those systems report through their own calls.
    """
    import builtins
    import io

    unrestricted_open = builtins.open

    def open_without_proc_self(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, str | bytes | os.PathLike):
            path = os.fsdecode(file)
            if path == "/proc/self" or path.startswith("/proc/self/"):
                raise FileNotFoundError(2, "No such file or directory", path)
        return unrestricted_open(file, *args, **kwargs)

    builtins.open = io.open = open_without_proc_self


# -- Windows -----------------------------------------------------------------------


def _remove(missing: dict[types.ModuleType, tuple[str, ...]]) -> None:
    for module, names in missing.items():
        for name in names:
            if hasattr(module, name):
                delattr(module, name)


def _terminate_like_windows(pid: int, sig: int) -> None:
    # 0 checks that a process exists (psutil relies on it here); SIGSTOP and SIGCONT
    # are psutil's suspend and resume, which Windows has too (NtSuspendProcess).
    if sig in (0, signal.SIGSTOP, signal.SIGCONT):
        real.kill(pid, sig)
    else:
        real.kill(pid, signal.SIGKILL)


def _exit_code_like_windows(status: int) -> int:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return _WINDOWS_EXIT_CODES.get(number, number)
    return real.waitstatus_to_exitcode(status)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_like_windows(signum: int) -> None:
    if _main_thread():
        real.raise_signal(signum)
    else:
        # Windows runs the C handler in the calling thread: it flags the signal for
        # the main thread, which runs the Python handler at its next bytecode.
        _thread.interrupt_main(signum)


def _interruptible_sleep(seconds: float) -> None:
    # On Windows the main thread's time.sleep waits on the SIGINT event too.
    if not _main_thread() or seconds <= SLICE:
        real.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        real.sleep(min(left, SLICE))  # a pending handler runs between two slices


def _programs_born_ignoring_ctrl_c(module: types.ModuleType) -> None:
    """Windows: this process was born ignoring the console's Ctrl-C, so each program it
    starts is too (the flag is inherited, independent of this process's handlers)."""
    popen = module.Popen
    starts = popen.__init__

    def __init__(self: Any, *args: Any, preexec_fn: Any = None, **kwargs: Any) -> None:
        def ignoring_ctrl_c() -> None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            if preexec_fn is not None:
                preexec_fn()

        starts(self, *args, preexec_fn=ignoring_ctrl_c, **kwargs)

    popen.__init__ = __init__


def _spawn_only(module: types.ModuleType) -> None:
    contexts = module._concrete_contexts
    for method in ("fork", "forkserver"):
        contexts.pop(method, None)
    module._default_context._default_context = contexts["spawn"]
    module.DefaultContext.get_all_start_methods = lambda self: ["spawn"]


def _windows_waits(module: types.ModuleType) -> None:
    unlimited_wait = module.wait

    def wait(object_list: Any, timeout: float | None = None) -> list:
        objects = list(object_list)
        limit = _WINDOWS_WAIT_LIMIT - (1 if _main_thread() else 0)
        if len(objects) > limit:
            raise ValueError(
                f"need at most {limit} handles, got a sequence of length {len(objects)}"
            )
        if not _main_thread():
            return unlimited_wait(objects, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SLICE if deadline is None else max(0.0, min(SLICE, deadline - time.monotonic()))
            ready = unlimited_wait(objects, left)
            if ready or (deadline is not None and time.monotonic() >= deadline):
                return ready

    module.wait = wait
    # A main-thread read on a Windows pipe connection waits on the SIGINT event too.
    connection = module.Connection
    for name in ("recv_bytes", "recv"):
        blocking = getattr(connection, name)

        def interruptible(self: Any, *args: Any, _blocking: Any = blocking) -> Any:
            if _main_thread():
                self.poll(None)  # the sliced wait above, until there is something to read
            return _blocking(self, *args)

        setattr(connection, name, interruptible)


#: Libraries that import what Windows lacks only when ``sys.platform`` says POSIX.
_POSIX_BY_PLATFORM = ("psutil", "billiard", "kombu", "celery")


class _HiddenStdlib(importlib.abc.MetaPathFinder):
    """Standard-library modules the simulated OS does not have.

    A module of that name elsewhere on ``sys.path`` (a ``resource.py`` in a Dags
    folder, say) is still found, as it would be there. Libraries that choose their
    POSIX code by ``sys.platform`` (which stays ``linux``), and so stand in for their
    Windows code here, still import the real ones: psutil's Linux backend, and Celery's
    stack (billiard, kombu, celery).
    """

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        stdlib = os.path.dirname(os.__file__)
        zipped = f"python{sys.version_info.major}{sys.version_info.minor}.zip"
        self.stdlib = {stdlib, os.path.join(stdlib, "lib-dynload"),
                       os.path.join(os.path.dirname(stdlib), zipped)}  # fmt: skip
        for name in names:
            sys.modules.pop(name, None)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.names or _importer().startswith(_POSIX_BY_PLATFORM):
            return None
        elsewhere = [
            entry for entry in sys.path if os.path.abspath(entry or ".") not in self.stdlib
        ]
        spec = importlib.machinery.PathFinder.find_spec(name, elsewhere)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec


def _importer() -> str:
    """The name of the module whose code runs the import being looked up."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


# -- macOS -------------------------------------------------------------------------


def _spawn_by_default(module: types.ModuleType) -> None:
    module._default_context._default_context = module._concrete_contexts["spawn"]


def _short_unix_paths(module: types.ModuleType) -> None:
    socket_class = module.socket

    def refusing(method: Any) -> Any:
        def checked(self: Any, address: Any) -> Any:
            if self.family == module.AF_UNIX and isinstance(address, str | bytes):
                raw = address.encode() if isinstance(address, str) else address
                if len(raw) > _MACOS_SUN_PATH:
                    raise OSError("AF_UNIX path too long")
            return method(self, address)

        return checked

    socket_class.bind = refusing(socket_class.bind)
    socket_class.connect = refusing(socket_class.connect)


# -- import hooks ------------------------------------------------------------------


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a patch on a module right after it is first executed."""

    def __init__(self) -> None:
        self.patches: dict[str, Any] = {}

    def add(self, name: str, patch: Any) -> None:
        if name in sys.modules:
            patch(sys.modules[name])
        else:
            self.patches[name] = patch

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        patch = self.patches.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, patch: Any):
        self._loader, self._patch = loader, patch

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
