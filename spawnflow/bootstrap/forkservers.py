"""The forkservers a whole process tree shares (Linux and macOS).

Under the forkserver start method, multiprocessing gives each process that launches
a child a server of its own: a fresh interpreter that forks the children. In a
spawnflow tree that was one server per launching process (standalone, the Dag
processor, the scheduler, every executor worker, the triggerer), each a whole
interpreter, and the children of one server shared pages only with that server. Here
the process that starts a tree starts at most two servers and hands them down to every
process of the tree, which launches through them instead of starting its own:

* ``database``, for the roles that hold an engine (law 3): it preloads SQLAlchemy's
  ORM, the models and the components' modules, whose pages its children then share;
* ``user``, for every other role (user code, which never imports SQLAlchemy): it
  preloads the launcher and what a file parser, a task and an XCom helper import.

A process shares its servers (:func:`share`) with the children it names
(``launcher.launch`` with ``share_forkservers``); a child adopts what it was handed
(:func:`adopt`) and hands it on to its own children. A child forked by an adopted
server is not its launcher's child in the OS tree, so it gets a control pipe: its EOF
tells it that the launcher died, on Linux too. The process that owns the servers takes
whatever they forked into a cold stop of the children it shared them with
(:func:`forked`), so that a cold stop of the tree still leaves nothing behind.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import msgspec

from spawnflow.bootstrap import platform as platforms

if TYPE_CHECKING:
    from spawnflow.bootstrap.settings import Settings

#: The roles whose processes hold an engine; every other role forks from ``user``.
DATABASE_ROLES = frozenset(
    {"dag-processor", "scheduler", "triggerer", "executor-worker", "database-setup"}
)

#: What each server imports once, for its children to share. Never user code, nothing
#: that opens a socket or starts a thread at import; SQLAlchemy only in ``database``
#: (a test checks all three), and no logging library in ``user`` (its short-lived
#: children pay for logging only when they log).
PRELOAD = {
    "database": (
        "spawnflow.bootstrap.launcher",
        "sqlalchemy.orm",
        "spawnflow.models.ready",
        "spawnflow.processors.dag_processor.manager",
        "spawnflow.processors.scheduler.job",
        "spawnflow.processors.triggerer.job",
        "spawnflow.processors.worker.worker",
    ),
    "user": (
        "spawnflow.bootstrap.launcher",
        "spawnflow.processors.dag_processor.parser",
        "spawnflow.processors.task_runner",
        "spawnflow.processors.xcom_helper",
    ),
}


class ServerRef(msgspec.Struct, frozen=True):
    """Where a running forkserver listens, for a child to launch through it."""

    kind: str
    address: str
    #: The key that the server asks a client to prove (Python 3.14+); None before.
    authkey: bytes | None = None


def kind_of(role: str) -> str:
    """Which server forks a process of ``role``."""
    return "database" if role in DATABASE_ROLES else "user"


#: This process's servers by kind: its own (started here) or adopted (handed down).
_servers: dict[str, Any] = {}
#: Kinds whose servers this process started and hands down to its children.
_shared: set[str] = set()
#: The server the launch in progress goes through (see :func:`launching_through`).
_launch = threading.local()


def server_for(role: str) -> Any:
    """The server that forks a child of ``role``: adopted, already started here, or a
    new one of this process (started with its first launch)."""
    kind = kind_of(role)
    server = _servers.get(kind)
    if server is None:
        from multiprocessing.forkserver import ForkServer

        server = _servers[kind] = ForkServer()
        server.set_forkserver_preload(list(PRELOAD[kind]))
    return server


def adopted(role: str) -> bool:
    """Whether a child of ``role`` is forked by a server another process started (it is
    then no child of ours in the OS tree)."""
    return isinstance(_servers.get(kind_of(role)), _AdoptedServer)


def starts_by_exec(role: str) -> bool:
    """Whether launching a child of ``role`` under forkserver starts its server's
    interpreter first (the first launch through a server of our own)."""
    server = _servers.get(kind_of(role))
    return server is None or (
        not isinstance(server, _AdoptedServer) and server._forkserver_pid is None
    )


def share(settings: Settings, roles: Iterable[str]) -> None:
    """Prepare what the processes of ``roles`` and their trees share.

    Under forkserver: start now the servers they need (unless they were handed down),
    to be handed to the children launched with ``share_forkservers`` (see
    ``launcher.launch``), so that their whole trees fork from them. Only those children
    get them: a stop of all of them (``stop_many`` with ``whole_tree``) takes everything
    the servers forked. Starting returns at once: the server's interpreter boots
    meanwhile, and the first launch through it waits for it.

    Under fork: import here what their server would have preloaded; the children forked
    from this process share those pages instead of each loading its own copy.
    """
    from spawnflow.bootstrap import startmethods

    for role in roles:
        if startmethods.for_role(settings, role)[0] == "fork":
            for name in PRELOAD[kind_of(role)]:
                importlib.import_module(name)
        elif start_early(settings, role):
            _shared.add(kind_of(role))


def start_early(settings: Settings, role: str) -> bool:
    """Start the server that forks ``role`` now if ``role`` starts under forkserver and
    the server is neither handed down nor running: its first launch would otherwise wait
    for its interpreter and preload (seconds on a busy machine, during which a worker
    could not say it lives). Whether the server is this process's own."""
    from spawnflow.bootstrap import startmethods

    if startmethods.for_role(settings, role)[0] != "forkserver" or adopted(role):
        return False
    server = server_for(role)
    if server._forkserver_pid is None:
        startmethods.context("forkserver")  # the socket's folder, before the server starts
        with platforms.current().launching(exec_follows=True):
            server.ensure_running()
    return True


def handed_down(shared: bool) -> tuple[ServerRef, ...]:
    """What this process hands to a child it launches: the servers it adopted (its whole
    tree forks from them), and with ``shared`` those it shares."""
    refs = []
    for kind, server in _servers.items():
        if isinstance(server, _AdoptedServer):
            refs.append(server.ref)
        elif shared and kind in _shared and server._forkserver_address is not None:
            authkey = getattr(server, "_forkserver_authkey", None)
            refs.append(ServerRef(kind, server._forkserver_address, authkey))
    return tuple(refs)


def adopt(refs: Iterable[ServerRef]) -> None:
    """In a child: launch through the servers its launcher handed down."""
    for ref in refs:
        _servers[ref.kind] = _AdoptedServer(ref)


@contextmanager
def launching_through(role: str) -> Iterator[None]:
    """Around ``Process.start()`` under forkserver: the launch goes through the server
    of ``role`` (see :func:`_connect_through_chosen_server`)."""
    _route_launches()
    _launch.server = server_for(role)
    try:
        yield
    finally:
        _launch.server = None


def forked(skip: Iterable[int] = ()) -> list[Any]:
    """The processes that the servers this process shares forked, with their
    descendants: children of those servers, not of the processes that launched them,
    so a stop of the whole tree has to take them too (see ``child.stop_many``). What
    was forked as a process in ``skip`` (children of ours that the stop leaves alone)
    is left out with its descendants."""
    import psutil

    skipped = set(skip)
    found: list[psutil.Process] = []
    for kind in _shared:
        try:
            launched = psutil.Process(_servers[kind]._forkserver_pid).children()
        except psutil.Error:
            continue
        for process in launched:
            if process.pid in skipped:
                continue
            try:
                found += [process, *process.children(recursive=True)]
            except psutil.Error:
                continue
    return found


# -- how a launch reaches the chosen server -------------------------------------------


class _AdoptedServer:
    """A server that another process of the tree started: connect to it, never start it.

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
        self._server.ensure_running = self._ensure_running

    @staticmethod
    def _ensure_running() -> None:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()  # shared too: handed down by the launcher

    def connect_to_new_process(self, fds: Sequence[int]) -> tuple[int, int]:
        return self._server.connect_to_new_process(fds)


_placeholder: int | None = None


def _placeholder_fd() -> int:
    global _placeholder
    if _placeholder is None:
        _placeholder = os.open(os.devnull, os.O_RDONLY)
    return _placeholder


def _route_launches() -> None:
    """Make multiprocessing's forkserver launches go through the chosen server.

    Its Popen asks the module-level ``connect_to_new_process``, bound to the one server
    a process has by default; this puts a function there that asks the server chosen by
    :func:`launching_through` instead (the default one outside it).
    """
    from multiprocessing import forkserver

    if getattr(forkserver.connect_to_new_process, "routes_launches", False):
        return
    default = forkserver.connect_to_new_process

    def connect_to_new_process(fds: Sequence[int]) -> tuple[int, int]:
        server = getattr(_launch, "server", None)
        return default(fds) if server is None else server.connect_to_new_process(fds)

    connect_to_new_process.routes_launches = True  # type: ignore[attr-defined]
    forkserver.connect_to_new_process = connect_to_new_process


def _after_fork_in_child() -> None:
    # The parent's servers are not ours to start, stop or hand down: what a fork child
    # may use is what its launcher hands it, as under the other methods.
    _servers.clear()
    _shared.clear()
    _launch.__dict__.clear()


platforms.at_fork_in_child(_after_fork_in_child)
