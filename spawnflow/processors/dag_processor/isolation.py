"""What a Dag file may leave behind in a parser that goes on to parse another file.

A parser child parses up to ``[dag_processor] parser_max_files`` files, one after the
other, so that a spawned interpreter's start (a few hundred milliseconds) is paid once
per batch rather than once per file. Nothing one file sets may be seen by the next, so
around each file the parser takes a :class:`Snapshot` and, afterwards, either puts the
process back as it was or gives up on it:

* put back: ``sys.path``, ``os.environ``, the working directory and the warning
  filters; modules imported from anywhere but the installed libraries (the Dag file
  itself, helpers in the Dags folder) are dropped from ``sys.modules``, so the next file
  imports its helpers afresh, as it would in a new process;
* given up on (the parser leaves after answering, and a fresh one parses the next
  file): a thread still running, a process started, a global of an already imported
  module rebound (monkeypatching), a module replaced or removed, a signal handler, a
  logging handler or level, an import hook or a ``sys`` hook changed.

What stays: installed libraries the file imported for the first time (importing pandas
again for every file would cost more than the child saves), and changes made *inside*
objects, such as an entry added to a library's own dict. A Dag file that relies on
mutating a library's state should run with ``parser_max_files = 1``.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
import sysconfig
import threading
import types
import warnings
from pathlib import Path

#: Globals Python itself sets on a module as it runs (not the file's doing).
_RUNTIME_GLOBALS = frozenset({"__warningregistry__", "__loader__", "__spec__", "__cached__"})
#: ``sys`` attributes the interpreter rebinds on its own.
_SYS_RUNTIME = frozenset({"last_type", "last_value", "last_traceback", "last_exc", "exc_info"})

#: Where modules kept across files live: Python's own, installed packages', and
#: spawnflow's (even when installed in development mode, from a checkout).
_LIBRARY_FOLDERS = tuple(
    {str(Path(p).resolve()) + os.sep for name in ("stdlib", "platstdlib", "purelib", "platlib")
     if (p := sysconfig.get_paths().get(name))}
    | {str(Path(__file__).resolve().parents[2]) + os.sep}
)  # fmt: skip


def _is_library(module: object) -> bool:
    """Whether ``module`` comes with Python or an installed package (kept across files)."""
    file = getattr(module, "__file__", None)
    if file is None:
        # Built in, or a namespace package: a namespace package of the Dags folder
        # has its folder on __path__.
        paths = list(getattr(module, "__path__", []) or [])
        return not paths or all(str(p).startswith(_LIBRARY_FOLDERS) for p in paths)
    try:
        return str(Path(file).resolve()).startswith(_LIBRARY_FOLDERS)
    except (OSError, ValueError):
        return False


def _loggers() -> dict[str, tuple]:
    found: dict[str, tuple] = {"": (tuple(logging.root.handlers), logging.root.level)}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            found[name] = (tuple(logger.handlers), logger.level, logger.propagate)
    return found


def _hooks() -> dict[str, object]:
    return {
        "sys.excepthook": sys.excepthook, "sys.displayhook": sys.displayhook,
        "sys.stdin": sys.stdin, "sys.stdout": sys.stdout, "sys.stderr": sys.stderr,
        "sys.gettrace()": sys.gettrace(), "sys.getprofile()": sys.getprofile(),
        "sys.getrecursionlimit()": sys.getrecursionlimit(),
        "sys.getswitchinterval()": sys.getswitchinterval(),
        "sys.meta_path": tuple(sys.meta_path), "sys.path_hooks": tuple(sys.path_hooks),
        "threading.excepthook": threading.excepthook,
        "socket.getdefaulttimeout()": socket.getdefaulttimeout(),
        "gc.isenabled()": gc.isenabled(),
        # A timer's signal would end the next file's parse (POSIX only).
        "signal.getitimer(ITIMER_REAL)": _timer(),
    }  # fmt: skip


def _timer() -> object:
    """The interval timer (``signal.setitimer``, ``signal.alarm``): POSIX only."""
    getitimer = getattr(signal, "getitimer", None)
    return None if getitimer is None else getitimer(signal.ITIMER_REAL)  # type: ignore[attr-defined]


class Snapshot:
    """The process state a Dag file could change, taken just before it is imported."""

    def __init__(self) -> None:
        self.modules = dict(sys.modules)
        self.globals = {
            name: dict(vars(module))
            for name, module in self.modules.items()
            if isinstance(module, types.ModuleType)
        }
        self.path = list(sys.path)
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.warning_filters = list(warnings.filters)
        self.threads = set(threading.enumerate())
        self.signals = {number: signal.getsignal(number) for number in _signals()}
        self.loggers = _loggers()
        self.hooks = _hooks()

    def restore(self) -> str | None:
        """Put back what can be put back; say what cannot (then the parser must leave).

        Call once the file has been imported and answered for, from the main thread.
        """
        left = self._put_back()
        why = self._what_stayed()
        return why or left

    def _put_back(self) -> str | None:
        if sys.path != self.path:
            sys.path[:] = self.path
        if os.environ != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        try:
            if os.getcwd() != self.cwd:
                os.chdir(self.cwd)
        except OSError as error:  # the file removed the folder it left us in
            return f"it changed the working directory and it cannot be restored ({error})"
        warnings.filters[:] = self.warning_filters  # type: ignore[index]
        added = [name for name in sys.modules if name not in self.modules]
        dropped = {name for name in added if not _is_library(sys.modules[name])}
        kept = [name for name in added if name not in dropped]
        for name in dropped:
            del sys.modules[name]
        # A library the file imported first has no globals to compare with; what
        # gives a patch away is a global defined by the file's own code.
        for name in kept:
            patched = _defined_in(sys.modules[name], dropped)
            if patched is not None:
                return f"it rebound {name}.{patched}"
        return None

    def _what_stayed(self) -> str | None:
        running = [t.name for t in threading.enumerate() if t not in self.threads and t.is_alive()]
        if running:
            return f"it left thread {running[0]!r} running"
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                return f"it replaced or removed module {name!r}"
        for name, before in self.globals.items():
            changed = _changed_global(name, before, vars(self.modules[name]))
            if changed is not None:
                return f"it rebound {changed}"
        for number, handler in self.signals.items():
            if signal.getsignal(number) != handler:
                return f"it changed the handler of {signal.Signals(number).name}"
        now = _loggers()
        for name, was in self.loggers.items():
            if now.get(name) != was:
                return f"it changed the handlers or level of logger {name or 'root'!r}"
        for name, state in now.items():
            if name not in self.loggers and (state[0] or state[1] != logging.NOTSET):
                return f"it gave logger {name!r} handlers or a level"
        for hook, value in _hooks().items():
            if self.hooks[hook] != value:
                return f"it changed {hook}"
        return None


def _defined_in(module: object, modules: set[str]) -> str | None:
    """The first global of ``module`` that is a function or class of ``modules``."""
    for key, value in list(vars(module).items()):
        if isinstance(value, (types.FunctionType, type)) and value.__module__ in modules:
            return key
    return None


def _changed_global(module: str, before: dict, after: dict) -> str | None:
    """The first global of ``module`` that was added, rebound or deleted, if any."""
    if after.keys() - before.keys() - _RUNTIME_GLOBALS:
        added = next(iter(after.keys() - before.keys() - _RUNTIME_GLOBALS))
        return f"{module}.{added}"
    ignored = _SYS_RUNTIME if module == "sys" else _RUNTIME_GLOBALS
    for key, value in before.items():
        if key not in ignored and after.get(key, _MISSING) is not value:
            return f"{module}.{key}"
    return None


_MISSING = object()


def _signals() -> list[int]:
    # SIGKILL and SIGSTOP cannot be handled; getsignal reports them as defaults anyway.
    return sorted(signal.valid_signals())
