"""Start methods: which exist here, which one each component uses (law 2).

Nothing in spawnflow calls ``set_start_method`` or uses a library default (the
``multiprocess`` package defaults to fork even on macOS). Each component asks
:func:`for_component`, and the launcher builds a context with :func:`context`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings_table import COMPONENTS

if TYPE_CHECKING:
    from spawnflow.bootstrap.settings import Settings, Source

#: Modules the forkserver imports once so that its children start warm. Only
#: bootstrap and processor modules: never user code, nothing that opens a socket
#: or starts a thread at import, and nothing that imports SQLAlchemy (children
#: that do not use the database must not carry it; a test checks all three).
FORKSERVER_PRELOAD = (
    "spawnflow.bootstrap.launcher",
    "spawnflow.processors.dag_processor.parser",
)


class StartMethodUnavailable(UserError, ValueError):
    """The configured start method does not exist on this OS."""


def available(platform: platforms.Platform | None = None) -> tuple[str, ...]:
    """The start methods this OS offers."""
    return (platform or platforms.current()).start_methods


def default(platform: platforms.Platform | None = None) -> str:
    """The method spawnflow uses when nothing is configured."""
    return (platform or platforms.current()).default_start_method


def for_component(settings: Settings, component: str | None = None) -> tuple[str, Source]:
    """The start method for ``component``'s children and the source of that choice.

    ``[component] mp_start_method`` wins when set; otherwise ``[core] mp_start_method``.
    """
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
    import os

    import multiprocess.forkserver as forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass
        server._forkserver_alive_fd = None


def context(method: str):
    """A ``multiprocess`` context for ``method`` (never the library's default context)."""
    import multiprocess

    ctx = multiprocess.get_context(check(method))
    if method == "forkserver":
        # A hint that takes effect when this process first starts its forkserver.
        ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    return ctx
