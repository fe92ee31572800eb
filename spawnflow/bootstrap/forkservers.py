"""The forkservers a whole process tree shares (Linux and macOS).

Under the forkserver start method, multiprocessing gives each process that launches
a child a server of its own: a fresh interpreter that forks the children. In a
spawnflow tree that was one interpreter per launching process (standalone, the Dag
processor, the scheduler, every executor worker, the triggerer), and the children of
one server shared pages only with that server. Here the process that starts a tree
starts two, and the whole tree forks from them:

* ``database``, for the roles that hold an engine (law 3): it preloads SQLAlchemy's
  ORM, the models and the components' modules, whose pages its children then share;
* ``user``, for every other role (user code, which never imports SQLAlchemy): it
  preloads the launcher and what a file parser, a task and an XCom helper import.

A process shares its servers (:func:`share`) with the children it names
(``launcher.launch`` with ``share_forkservers``); a child adopts what it was handed
(:func:`adopt`) and hands it on to its own children. A process that adopted a server
launches through a server of its own that the shared one forks
(:mod:`spawnflow.bootstrap.subservers`): no interpreter of its own, and its children's
parent dies with it, so the kernel's parent-death signal still ends them. The process
that owns the shared servers takes whatever they forked into a cold stop of the
children it shared them with (:func:`forked`), so that a cold stop of the tree leaves
nothing behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.subservers import ServerRef, SubServer, Upstream, launched_by, routed

if TYPE_CHECKING:
    import psutil

    from spawnflow.bootstrap.settings import Settings

__all__ = ["ServerRef", "adopt", "forked", "handed_down", "share", "start_early", "unshare"]

#: The roles whose processes hold an engine; every other role forks from ``user``.
DATABASE_ROLES = frozenset(
    {"dag-processor", "scheduler", "triggerer", "executor-worker", "database-setup"}
)

#: What each server imports once, for its children to share. First the guard that keeps
#: a server alive when a client goes away mid-request. Never user code, nothing that
#: opens a socket or starts a thread at import, and SQLAlchemy only in ``database`` (a
#: test checks all three). No structlog: these children write their lines to files,
#: which takes only the standard library and msgspec (``bootstrap.logs``).
PRELOAD = {
    "database": (
        "spawnflow.bootstrap.forkserver_guard",
        "spawnflow.bootstrap.launcher",
        "sqlalchemy.orm",
        "spawnflow.models.ready",
        "spawnflow.processors.dag_processor.manager",
        "spawnflow.processors.scheduler.job",
        "spawnflow.processors.triggerer.job",
        "spawnflow.processors.worker.worker",
    ),
    "user": (
        "spawnflow.bootstrap.forkserver_guard",
        "spawnflow.bootstrap.launcher",
        "spawnflow.processors.dag_processor.parser",
        "spawnflow.processors.task_runner",
        "spawnflow.processors.xcom_helper",
    ),
}


#: What only a server imports (it changes how its loop takes errors).
_GUARD = "spawnflow.bootstrap.forkserver_guard"


def kind_of(role: str) -> str:
    """Which server forks a process of ``role``."""
    return "database" if role in DATABASE_ROLES else "user"


#: This process's servers by kind: a ForkServer it started, or a SubServer forked from
#: one it was handed.
_servers: dict[str, Any] = {}
#: Kinds whose servers this process started and hands to the children it names.
_shared: set[str] = set()


def server_for(role: str) -> Any:
    """The server that forks a child of ``role``: this process's own, started with its
    first launch unless started before, or forked from one that was handed down."""
    kind = kind_of(role)
    server = _servers.get(kind)
    if server is None:
        from multiprocessing.forkserver import ForkServer

        server = _servers[kind] = ForkServer()
        server.set_forkserver_preload(list(PRELOAD[kind]))
    return server


def starts_by_exec(role: str) -> bool:
    """Whether launching a child of ``role`` under forkserver starts a server's
    interpreter first (the first launch through a server this process starts; one
    forked from a handed-down server is no new interpreter)."""
    server = _servers.get(kind_of(role))
    return server is None or (not isinstance(server, SubServer) and server._forkserver_pid is None)


def fork_preload(settings: Settings, roles: Iterable[str]) -> list[str]:
    """What a process that forks the processes of ``roles`` (those started under fork)
    imports first, for them to share its pages instead of each loading its own copy."""
    from spawnflow.bootstrap import startmethods

    names: list[str] = []
    for role in roles:
        if startmethods.for_role(settings, role)[0] == "fork":
            names += [n for n in PRELOAD[kind_of(role)] if n not in names and n != _GUARD]
    return names


def share(settings: Settings, roles: Iterable[str]) -> set[str]:
    """Start now the servers that the processes of ``roles`` started under forkserver
    will need, unless they were handed down, to be handed to the children launched with
    ``share_forkservers`` (see ``launcher.launch``), so that their whole trees fork from
    them. Only those children get them: a stop of all of them (``stop_many`` with
    ``whole_tree``) takes everything the servers forked. Starting returns at once: the
    server's interpreter boots meanwhile, and the first launch through it waits for it.
    The kinds of server this call began to share.
    """
    began = set()
    for role in roles:
        kind = kind_of(role)
        if start_early(settings, role) and kind not in _shared:
            _shared.add(kind)
            began.add(kind)
    return began


def unshare(kinds: Iterable[str]) -> None:
    """Hand the servers of ``kinds`` to no more children (they keep running)."""
    _shared.difference_update(kinds)


def start_early(settings: Settings, role: str) -> bool:
    """Start the server that forks ``role`` now if ``role`` starts under forkserver and
    the server does not run: its first launch would otherwise wait for it (seconds for
    an interpreter and its preload on a busy machine, during which a worker could not
    say it lives). Whether the server is one this process started itself."""
    from spawnflow.bootstrap import startmethods

    if startmethods.for_role(settings, role)[0] != "forkserver":
        return False
    server = server_for(role)
    if isinstance(server, SubServer):
        server.ensure_running()
        return False
    if server._forkserver_pid is None:
        startmethods.context("forkserver")  # the socket's folder, before the server starts
        with platforms.current().launching(exec_follows=True):
            server.ensure_running()
    return True


def handed_down(shared: bool) -> tuple[ServerRef, ...]:
    """What this process hands to a child it launches: the servers it was handed (its
    whole tree forks from them), and with ``shared`` those it shares."""
    refs = []
    for kind, server in _servers.items():
        if isinstance(server, SubServer):
            refs.append(server.upstream.ref)
        elif shared and kind in _shared and server._forkserver_address is not None:
            authkey = getattr(server, "_forkserver_authkey", None)
            refs.append(
                ServerRef(kind, server._forkserver_address, server._forkserver_pid, authkey)
            )
    return tuple(refs)


def adopt(refs: Iterable[ServerRef]) -> None:
    """In a child: launch through servers forked from those its launcher handed down."""
    for ref in refs:
        _servers[ref.kind] = SubServer(Upstream(ref))


@contextmanager
def launching_through(role: str) -> Iterator[None]:
    """Around ``Process.start()`` under forkserver: the launch goes through the server
    of ``role``, forked from a handed-down one first if need be."""
    server = server_for(role)
    if isinstance(server, SubServer):
        server.ensure_running()  # now, not in the middle of the launch it serves
    with routed(server):
        yield


def tree(processes: list[psutil.Process]) -> list[psutil.Process]:
    """``processes`` (a tree walk) with what they launched through servers of their own
    forked from the shared ones, which the walk does not see (Linux: see
    :func:`~spawnflow.bootstrap.subservers.launched_by`)."""
    return launched_by(processes, _shared_pids()) if processes else processes


def forked(skip: Iterable[int] = ()) -> list[psutil.Process]:
    """The processes that the servers this process shares forked, with their
    descendants: no descendants of the processes that launched them, so a stop of the
    whole tree has to take them too (see ``child.stop_many``). Processes in ``skip``
    (children of ours that the stop leaves alone) are left out with what they launched."""
    if not _shared:
        return []  # every child exits through here: one that shares nothing skips psutil
    import psutil

    found: list[psutil.Process] = []
    for kind in _shared:
        try:
            found += psutil.Process(_servers[kind]._forkserver_pid).children(recursive=True)
        except psutil.Error:
            continue
    spared: list[psutil.Process] = []
    for pid in skip:
        try:
            spared += [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            continue
    left_alone = {process.pid for process in tree(spared)}
    return [process for process in found if process.pid not in left_alone]


def _shared_pids() -> list[int]:
    """The shared servers this process knows: those it started and shares, and those
    it was handed."""
    pids = []
    for kind, server in _servers.items():
        if isinstance(server, SubServer):
            pids.append(server.upstream.ref.pid)
        elif kind in _shared and server._forkserver_pid is not None:
            pids.append(server._forkserver_pid)
    return pids


def _after_fork_in_child() -> None:
    # The parent's servers are not ours to use, stop or hand down: what a fork child
    # may use is what its launcher hands it, as under the other methods. Their alive
    # pipes are let go, or the servers would outlive the parent that owns them.
    import os

    for server in _servers.values():
        if isinstance(server, SubServer):
            server.close_inherited()
        elif server._forkserver_alive_fd is not None:
            try:
                os.close(server._forkserver_alive_fd)
            except OSError:
                pass
    _servers.clear()
    _shared.clear()


platforms.at_fork_in_child(_after_fork_in_child)
