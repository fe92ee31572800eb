"""A process's own forkserver, forked from a server its tree shares (Linux and macOS).

A process that was handed a shared server (:mod:`spawnflow.bootstrap.forkservers`) does
not launch its children through that server itself: they would be the shared server's
children, and the kernel's parent-death signal, which ends a child in any state (a
native call that holds the GIL included), would wait for the end of the whole tree. It
launches them through a server of its own, which the shared server forks: it starts at
once, shares the shared server's preloaded pages, and lives as long as its owner holds
its "alive" pipe. When the owner dies, its server leaves and the kernel signals every
child the server forked, as it did with multiprocessing's own server per process.

On Linux the server is named ``fs-<owner's pid>``, so that a walk of a process's tree
can find what the process launched (see :func:`launched_by`).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import msgspec

from spawnflow.bootstrap import platform as platforms

if TYPE_CHECKING:
    import psutil

#: What a server's process name starts with, before its owner's pid.
NAME_PREFIX = "fs-"
#: The server the launch in progress goes through (see :func:`routed`).
_launch = threading.local()


class ServerRef(msgspec.Struct, frozen=True):
    """Where a running forkserver listens, for a child to launch through it."""

    kind: str
    address: str
    pid: int
    #: The key that the server asks a client to prove (Python 3.14+); None before.
    authkey: bytes | None = None


class Upstream:
    """A server that another process of the tree started: fork from it, never start it.

    It has the attributes and the ``connect_to_new_process`` of multiprocessing's own
    ForkServer, whose code does the talking.
    """

    def __init__(self, ref: ServerRef):
        from multiprocessing.forkserver import ForkServer

        self.ref = ref
        # Its private attributes are set here; typeshed does not know them.
        self._server = cast(Any, ForkServer())
        self._server._forkserver_address = ref.address
        if ref.authkey is not None:
            self._server._forkserver_authkey = ref.authkey
        # The server passes this descriptor to each child it forks, as the pipe whose
        # write ends keep it alive; ours must not keep it alive, so any will do.
        self._server._forkserver_alive_fd = _placeholder_fd()
        self._server.ensure_running = platforms.resource_tracker_running

    def connect_to_new_process(self, fds: Sequence[int]) -> tuple[int, int]:
        return self._server.connect_to_new_process(fds)


class SubServer:
    """This process's own server, forked from ``upstream`` when it is first needed.

    ``upstream`` is a server another process started (an :class:`Upstream`: the
    server is this process's own, for its children), or one this process started
    itself, which the server then extends with ``preload`` (frozen after the import,
    see :mod:`spawnflow.bootstrap.forkserver_freeze`) to be shared in turn.
    """

    def __init__(self, upstream: Any, preload: Sequence[str] = ()):
        from multiprocessing.forkserver import ForkServer

        self.upstream = upstream
        self.preload = tuple(preload)
        self._server = cast(Any, ForkServer())
        self._server.ensure_running = self.ensure_running
        #: The running server (a psutil handle: it tells our server from a process that
        #: took its pid later).
        self._handle: psutil.Process | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return None if self._handle is None else self._handle.pid

    def running(self) -> bool:
        """Whether the server runs (asked of the OS, see :meth:`ensure_running`)."""
        import psutil

        try:
            handle = self._handle
            return handle is not None and handle.is_running() and handle.status() != "zombie"
        except psutil.Error:
            return False

    def forks_nothing(self) -> bool:
        """Whether no process it forked runs (nor any, if it does not run)."""
        import psutil

        try:
            return not self.running() or not cast("psutil.Process", self._handle).children()
        except psutil.Error:
            return True

    @property
    def adopted(self) -> bool:
        """Whether its upstream is a server another process started."""
        return isinstance(self.upstream, Upstream)

    def ref(self, kind: str) -> ServerRef | None:
        """Where it listens, for the children to fork from it; None until it runs."""
        server = self._server
        if self.pid is None or server._forkserver_address is None:
            return None
        authkey = getattr(server, "_forkserver_authkey", None)
        return ServerRef(kind, server._forkserver_address, self.pid, authkey)

    def ensure_running(self) -> None:
        """Fork the server from ``upstream`` unless it runs (again, if it died).

        Whether it runs is asked of the OS, not of the status pipe multiprocessing
        keeps for it: that pipe is the upstream server's, and reads as the server's
        end when the upstream server dies, though ours runs on.
        """
        platforms.resource_tracker_running()
        with self._lock:
            if self._handle is not None:
                if self.running():
                    return
                self.let_go()
            self._start()

    def connect_to_new_process(self, fds: Sequence[int]) -> tuple[int, int]:
        return self._server.connect_to_new_process(fds)

    def _start(self) -> None:
        import multiprocessing.connection as connections
        import socket

        import psutil

        from spawnflow.bootstrap import startmethods

        if sys.platform == "win32":
            raise RuntimeError("Windows has no forkserver")
        ctx = startmethods.context("forkserver")  # first: it fits the socket's folder
        # A fresh path in this process's temporary folder (a private helper, typeshed has none).
        address = cast(Any, connections).arbitrary_address("AF_UNIX")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        authkey = os.urandom(32) if sys.version_info >= (3, 14) else None
        passed = [listener.detach(), alive_r]
        if authkey is not None:
            key_r, key_w = os.pipe()
            os.write(key_w, authkey)  # 32 bytes: fits the pipe at once
            os.close(key_w)
            passed.append(key_r)
        # One forked to be shared keeps the name of the server it extends.
        owner = None if self.preload else os.getpid()
        process = ctx.Process(
            target=serve, args=(owner, *map(_Passed, passed)),
            kwargs={"preload": self.preload}, name="spawnflow-forkserver", daemon=True,
        )  # fmt: skip
        try:
            with routed(self.upstream):
                process.start()
        except BaseException:
            os.close(alive_w)
            _unlink(address)
            raise
        finally:
            for fd in passed:  # the server holds its own copies now
                os.close(fd)
        self._server._forkserver_address = address
        self._server._forkserver_alive_fd = alive_w
        self._server._forkserver_pid = process.pid
        self._server._forkserver_authkey = authkey
        self._handle = psutil.Process(process.pid)

    def let_go(self) -> None:
        """Close our end of the alive pipe (the server leaves when it sees EOF, and
        the kernel ends what it forked) and forget the server: the next launch
        through it forks it again."""
        self.close_inherited()
        if self._server._forkserver_address is not None:
            _unlink(self._server._forkserver_address)
        self._server._forkserver_address = self._server._forkserver_pid = None
        self._handle = None

    def close_inherited(self) -> None:
        """Close this process's end of the alive pipe. In a fork child of the owner: its
        copy, or the server would outlive its owner (the socket's path is the owner's)."""
        fd, self._server._forkserver_alive_fd = self._server._forkserver_alive_fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class _Passed:
    """A descriptor passed to a process the forkserver starts: its copy arrives with the
    request, and the target receives the descriptor's number in its process."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        from multiprocessing import reduction

        return _received, (cast(Any, reduction).DupFd(self.fd),)  # POSIX only


def _received(duplicate: Any) -> int:
    return duplicate.detach()


def _unlink(address: str) -> None:
    try:
        os.unlink(address)
    except OSError:
        pass


def import_preload(names: Iterable[str]) -> None:
    """Import ``names``, the pages of a process that forks (a server, or a fork parent)
    for its children to share; one this Python lacks (sqlite3, say) is left out, as
    multiprocessing's own server does: a child that needs it imports it, or says why."""
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def serve(
    owner: int | None, listener: int, alive: int, key: int | None = None,
    preload: Sequence[str] = (),
) -> None:  # fmt: skip
    """Target of a server process: multiprocessing's forkserver loop on the descriptors
    its owner passed. It has its upstream server's preload from the fork, and imports
    ``preload`` on top of it. ``owner``: the process it launches for, in its name."""
    import gc
    from multiprocessing import forkserver

    from spawnflow.bootstrap import forkserver_guard, startmethods

    forkserver_guard.install()  # the upstream server's guard was taken back at the fork
    # The upstream server handed us its "alive" pipe, as it does every child: held
    # here, by us and all we fork, it would outlive the process that started it.
    startmethods.release_forkserver()
    if owner is not None:
        platforms.current().name_process(f"{NAME_PREFIX}{owner}")
    import_preload(preload)
    if preload:
        gc.freeze()  # see forkserver_freeze: imported upstream already, so not again
    extra = {} if key is None else {"authkey_r": key}
    loop: Any = forkserver.main  # its keywords differ between Python versions
    loop(listener, alive, [], **extra)


def launched_by(tree: list[psutil.Process], servers: Sequence[int]) -> list[psutil.Process]:
    """``tree`` with what its processes launched through servers of their own forked
    from ``servers`` (the pids of the shared servers), and what those launched, and so
    on: processes that are no descendants of their launchers in the OS tree. Found by
    the servers' names, where the OS has them (Linux)."""
    import psutil

    owned: dict[int, list[psutil.Process]] = {}
    for pid in servers:
        try:
            forked = psutil.Process(pid).children()
        except psutil.Error:
            continue
        for process in forked:
            try:
                name = process.name()
            except psutil.Error:
                continue
            if name.startswith(NAME_PREFIX) and name[len(NAME_PREFIX) :].isdigit():
                owned.setdefault(int(name[len(NAME_PREFIX) :]), []).append(process)
    found = list(tree)
    seen = {process.pid for process in found}
    index = 0
    while index < len(found):
        owner = found[index]
        index += 1
        for server in owned.pop(owner.pid, []):
            try:
                if server.create_time() < owner.create_time():
                    continue  # the owner's pid, reused: not its server
                more = [server, *server.children(recursive=True)]
            except psutil.Error:
                continue
            found += [p for p in more if p.pid not in seen]
            seen.update(p.pid for p in more)
    return found


@contextmanager
def routed(server: Any) -> Iterator[None]:
    """Launches under forkserver in this thread go through ``server`` meanwhile."""
    _route_launches()
    before = getattr(_launch, "server", None)
    _launch.server = server
    try:
        yield
    finally:
        _launch.server = before


def _route_launches() -> None:
    """Make multiprocessing's forkserver launches go through the chosen server.

    Its Popen asks the module-level ``connect_to_new_process``, bound to the one server
    a process has by default; this puts a function there that asks the server chosen by
    :func:`routed` instead (the default one outside it).
    """
    from multiprocessing import forkserver

    if getattr(forkserver.connect_to_new_process, "routes_launches", False):
        return
    default = forkserver.connect_to_new_process

    def connect_to_new_process(fds: Any) -> tuple[int, int]:
        server = getattr(_launch, "server", None)
        return default(fds) if server is None else server.connect_to_new_process(fds)

    connect_to_new_process.routes_launches = True  # type: ignore[attr-defined]
    forkserver.connect_to_new_process = connect_to_new_process


_placeholder: int | None = None


def _placeholder_fd() -> int:
    global _placeholder
    if _placeholder is None:
        _placeholder = os.open(os.devnull, os.O_RDONLY)
    return _placeholder


def _forget_route() -> None:
    _launch.__dict__.clear()


platforms.at_fork_in_child(_forget_route)
