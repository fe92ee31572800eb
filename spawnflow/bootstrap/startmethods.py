"""Start methods: which exist here, which one each component uses (law 2).

Nothing in spawnflow calls ``set_start_method`` or uses a library default (the
``multiprocess`` package defaults to fork even on macOS, the standard library to fork
on Linux before 3.14). The launcher starts a child of a role with the method of the
component the role belongs to (:data:`ROLE_COMPONENTS`, :func:`for_role`) and builds a
context for it with :func:`context`.

Contexts are the standard library's ``multiprocessing``, not ``multiprocess``: the
launcher pickles its child spec itself, with the standard pickle, so dill (which
``multiprocess`` imports in every child it starts) would buy nothing. Measured in
instructions of a spawned child: a bare one 260 M under ``multiprocess``, 161 M under the
standard library; a launcher child 470 M before, 442 M after (its bootstrap imports most
of what dill pulls in anyway).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.context
import os
import sys
from typing import TYPE_CHECKING, Any

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings_table import COMPONENTS

if TYPE_CHECKING:
    from spawnflow.bootstrap.settings import Settings, Source

#: Which component's ``mp_start_method`` starts a process of each role: a component's
#: own process (when ``spawnflow standalone`` starts it) and the children it starts.
#: A role not listed (probes, commands' helpers) uses ``[core] mp_start_method``.
ROLE_COMPONENTS = {
    "dag-processor": "dag_processor",
    "file-parser": "dag_processor",
    "scheduler": "scheduler",
    "dag-callback": "scheduler",
    "executor-worker": "executor",
    "task": "executor",
    "xcom-helper": "executor",
    "triggerer": "triggerer",
    "trigger-runner": "triggerer",
}


def for_role(settings: Settings, role: str) -> tuple[str, Source]:
    """The start method of a process of ``role`` (see :data:`ROLE_COMPONENTS`)."""
    return for_component(settings, ROLE_COMPONENTS.get(role))


class StartMethodUnavailable(UserError, ValueError):
    """The configured start method does not exist on this OS."""


class ForkUnsafeWarning(RuntimeWarning):
    """fork was chosen on an OS where it exists but is unsafe (macOS)."""


def warn_if_unsafe(method: str, platform: platforms.Platform | None = None) -> None:
    """Warn (once per process and place) when ``method`` is fork where fork is unsafe.

    For the configured method only: a command that tries fork on purpose (``dags check``,
    ``doctor``) says so itself.
    """
    platform = platform or platforms.current()
    if method == "fork" and platform.fork_unsafe:
        import warnings

        warnings.warn(
            f"start method 'fork' on {platform.display_name}: a forked child can crash or "
            "deadlock once a system framework in its parent has started a thread; spawn, "
            "the default there, cannot ([core] mp_start_method)",
            ForkUnsafeWarning,
            stacklevel=3,
        )


def available(platform: platforms.Platform | None = None) -> tuple[str, ...]:
    """The start methods this OS offers."""
    return (platform or platforms.current()).start_methods


def default(platform: platforms.Platform | None = None) -> str:
    """The method spawnflow uses when nothing is configured."""
    return (platform or platforms.current()).default_start_method


def for_component(settings: Settings, component: str | None = None) -> tuple[str, Source]:
    """The start method of ``component``'s processes and the source of that choice.

    ``[component] mp_start_method`` wins when set; otherwise ``[core] mp_start_method``.
    """
    method, source = _configured(settings, component)
    warn_if_unsafe(method)
    return method, source


def _configured(settings: Settings, component: str | None) -> tuple[str, Source]:
    if component is not None:
        if component not in COMPONENTS:
            raise ValueError(f"unknown component {component!r}; known: {', '.join(COMPONENTS)}")
        entry = settings.entry(component, "mp_start_method")
        if entry.value is not None:
            return entry.value, entry.source
    entry = settings.entry("core", "mp_start_method")
    return entry.value, entry.source


def check(method: str, platform: platforms.Platform | None = None) -> str:
    """``method`` if this OS has it, else StartMethodUnavailable naming what it has."""
    platform = platform or platforms.current()
    offered = ", ".join(platform.start_methods)
    if method not in platforms.START_METHODS:
        raise StartMethodUnavailable(
            f"{method!r} is not a start method; this machine offers: {offered}"
        )
    if method not in platform.start_methods:
        raise StartMethodUnavailable(
            f"start method {method!r} is not available on {platform.display_name}; "
            f"this machine offers: {offered}"
        )
    return method


def release_forkserver() -> None:
    """In a forkserver child: stop keeping the forkserver alive.

    The forkserver exits once no process holds its "alive" pipe, and hands every
    child a copy so that it outlives its clients. spawnflow wants the opposite: when
    the process that launched the child dies, its forkserver must go, so that the
    child is told (its parent, the forkserver, died) and no orphan survives.
    """
    import multiprocessing.forkserver as forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if server is not None and fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None


#: What the launcher names each child's process object: ``spawnflow-<role>``.
CHILD_NAME_PREFIX = "spawnflow-"


class SpawnedChild(multiprocessing.context.SpawnProcess):
    """A spawned launcher child that ends as a forked one does: without the teardown.

    multiprocessing ends a fork or forkserver child with ``os._exit`` once ``run()`` has
    returned and its own clean-up (children joined, finalizers, non-daemon threads,
    stdout and stderr flushed) is done; a spawned child instead returns to the
    interpreter, which then tears down every module and object one by one: 20 to 40 ms
    of CPU for each task process, about a fifth of its life. This child runs the atexit
    hooks (logging's shutdown among them) and exits as the others do. What it skips, as
    fork and forkserver children do, is ``__del__`` of objects still alive at exit.
    """

    def _bootstrap(self, parent_sentinel: object = None) -> int:
        # multiprocessing's own (private, in every version since 3.8): run(), then the
        # clean-up; it returns the exit code that spawn_main would hand to sys.exit.
        exitcode = super()._bootstrap(parent_sentinel)  # type: ignore[misc]
        try:
            atexit._run_exitfuncs()
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(AttributeError, OSError, ValueError):
                    stream.flush()  # what the hooks wrote; a closed stream has nothing
            os._exit(exitcode)


def process_class(method: str, ctx: Any) -> type:
    """The class of a launcher child's process object under ``method``."""
    return SpawnedChild if method == "spawn" else ctx.Process


def context(method: str):
    """A ``multiprocessing`` context for ``method`` (never the library's default context)."""
    import multiprocessing

    ctx = multiprocessing.get_context(check(method))
    if method != "fork":
        _keep_main_out_of_children()
    if method == "forkserver":
        _fit_forkserver_socket()  # before this process starts a server (forkservers.py)
    return ctx


def _keep_main_out_of_children() -> None:
    """Have spawned and forkserver children of the launcher skip the parent's ``__main__``.

    multiprocessing tells such a child to run the parent's main script again, as
    ``__mp_main__``, so that what the script defines can be unpickled there. A launcher
    child enters through an import string (law 1) and needs none of it, but it paid for
    the script's imports on every start (under the ``pytest`` console script, all of
    pytest: a spawned child was ready in about 160 ms instead of 95) and ran the top-level
    code of a script without an ``if __name__ == "__main__"`` guard once per child. Only
    the launcher's children (by their name) lose it; any other Process a user starts
    keeps the standard behaviour.
    """
    from multiprocessing import spawn

    if getattr(spawn.get_preparation_data, "keeps_main_out", False):
        return  # installed already (installing twice would only wrap twice)
    original = spawn.get_preparation_data

    def get_preparation_data(name: str) -> dict:
        data = original(name)
        if name.startswith(CHILD_NAME_PREFIX):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    get_preparation_data.keeps_main_out = True  # type: ignore[attr-defined]
    spawn.get_preparation_data = get_preparation_data


#: What multiprocessing adds to its temporary folder for the forkserver's socket:
#: ``/pymp-XXXXXXXX/listener-XXXXXXXX``.
_SOCKET_SUFFIX = 32


def _fit_forkserver_socket() -> None:
    """Make sure the forkserver's socket path fits the OS's AF_UNIX limit.

    multiprocessing puts the socket in a folder under ``TMPDIR``; a long ``TMPDIR`` (macOS
    gives each user one under ``/var/folders``; CI runners and HPC jobs set deep ones)
    makes the path longer than ``sun_path`` and the forkserver fails with a bare
    ``AF_UNIX path too long``. As CPython 3.14 does, use a folder under ``/tmp`` then.
    """
    import tempfile
    from multiprocessing import process, util

    limit = platforms.current().unix_path_max
    # The standard library's own record of its temporary folder (private, stable since 3.8).
    config = process.current_process()._config  # type: ignore[attr-defined]
    if limit is None or config.get("tempdir") is not None:
        return  # no limit, or the folder is chosen (and the forkserver maybe started)
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) + _SOCKET_SUFFIX <= limit:
        return
    fallback = "/tmp"
    try:
        folder = tempfile.mkdtemp(prefix="pymp-", dir=fallback)
    except OSError as error:
        raise StartMethodUnavailable(
            f"the forkserver's socket would be too long for {platforms.current().display_name} "
            f"under the temporary folder {base!r} (TMPDIR), and {fallback} is not usable "
            f"({error.strerror}); set TMPDIR to a shorter folder or use the spawn start method"
        ) from None
    import shutil

    # What multiprocessing itself does for the folder it makes: remove it at exit.
    remove = util._remove_temp_dir  # type: ignore[attr-defined]
    util.Finalize(None, remove, args=(shutil.rmtree, folder), exitpriority=-100)
    config["tempdir"] = folder
