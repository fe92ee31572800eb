"""The forkservers a whole process tree shares (Linux and macOS).

Under the forkserver start method, multiprocessing gives each process that launches
a child a server of its own: a fresh interpreter that forks the children. In a
spawnflow tree that was one interpreter per launching process (standalone, the Dag
processor, the scheduler, every executor worker, the triggerer), and the children of
one server shared pages only with that server. Here the process that starts a tree
starts two, one interpreter between them, and the whole tree forks from them:

* ``user``, for the roles that run user code (which never imports SQLAlchemy): a new
  interpreter that preloads the launcher, what a file parser, a task and an XCom
  helper import, and what every process imports only on its first steps;
* ``database``, for the roles that hold an engine (law 3): forked from ``user``, it
  imports SQLAlchemy's ORM, the models, the components' modules and the SQLite driver
  on top, whose pages its children then share with it (and the interpreter's with every
  process of the tree).

Each freezes its preload (:mod:`spawnflow.bootstrap.forkserver_freeze`).

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

# A fork parent imports its fork preload as a server imports its own (see ``fork_preload``).
from spawnflow.bootstrap.subservers import import_preload as import_preload

if TYPE_CHECKING:
    import psutil

    from spawnflow.bootstrap.settings import Settings

__all__ = [
    "ServerRef",
    "adopt",
    "forked",
    "handed_down",
    "let_go",
    "share",
    "start_early",
    "unshare",
]

#: The roles whose processes hold an engine; every other role forks from ``user``.
DATABASE_ROLES = frozenset(
    {"dag-processor", "scheduler", "triggerer", "executor-worker", "database-setup"}
)

#: What launched processes import on their first steps rather than at import, so that
#: each paid for it alone: psutil to watch or stop children, ctypes for the C library,
#: the rotation of a role's log file (with logging.handlers, and queue through it). Seen
#: by recording imports in a busy standalone tree under forkserver: 1.2 MiB private in
#: each worker, the scheduler, the triggerer, the Dag processor and each file parser.
_FIRST_STEPS = ("psutil", "ctypes", "spawnflow.bootstrap.logrotation")

#: What each server imports once, for its children to share (``database`` on top of
#: ``user``'s, when it is forked from it). First the guard that keeps a server alive when
#: a client goes away mid-request, last the freeze. Never user code, nothing that
#: opens a socket or starts a thread at import, and SQLAlchemy only in ``database`` (a
#: test checks all three). No structlog: these children write their lines to files,
#: which takes only the standard library and msgspec (``bootstrap.logs``).
PRELOAD = {
    "database": (
        "spawnflow.bootstrap.forkserver_guard",
        "spawnflow.bootstrap.launcher",
        *_FIRST_STEPS,
        "sqlalchemy.orm",
        "spawnflow.models.ready",
        "spawnflow.processors.dag_processor.manager",
        "spawnflow.processors.scheduler.job",
        "spawnflow.processors.triggerer.job",
        "spawnflow.processors.worker.worker",
        "sqlite3",  # the default database's driver, imported by the first connection
        "spawnflow.bootstrap.forkserver_freeze",
    ),
    "user": (
        "spawnflow.bootstrap.forkserver_guard",
        "spawnflow.bootstrap.launcher",
        *_FIRST_STEPS,
        "spawnflow.processors.dag_processor.parser",
        "spawnflow.processors.task_runner",
        "spawnflow.processors.xcom_helper",
        "spawnflow.bootstrap.forkserver_freeze",
    ),
}


#: What only a server imports: it changes how its loop takes errors, and it freezes
#: the preload for the children's collections (a fork parent goes on making garbage).
_SERVER_ONLY = ("spawnflow.bootstrap.forkserver_guard", "spawnflow.bootstrap.forkserver_freeze")


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
    first launch unless started before, or forked from one that was handed down.

    Of this process's own servers only ``user`` is a new interpreter: ``database`` is
    forked from it and imports the rest of its preload on top, so that the whole tree
    shares one interpreter's pages and the ``user`` children still hold no SQLAlchemy.
    """
    kind = kind_of(role)
    server = _servers.get(kind)
    if server is None:
        from multiprocessing.forkserver import ForkServer

        root = _servers.get("user")
        if kind == "database" and not isinstance(root, SubServer):
            server = _servers[kind] = SubServer(server_for("task"), preload=PRELOAD[kind])
        else:  # its own interpreter; a database one too if this process adopted ``user``
            server = _servers[kind] = ForkServer()
            server.set_forkserver_preload(list(PRELOAD[kind]))
    return server


def _adopted(kind: str) -> bool:
    server = _servers.get(kind)
    return isinstance(server, SubServer) and server.adopted


def _execs_first(server: Any) -> bool:
    """Whether a launch through ``server`` starts an interpreter first: the first launch
    through a server this process starts (again, if it died), or through one it forks
    from such a server (one forked from a handed-down server is no new interpreter)."""
    if isinstance(server, SubServer):
        return not server.adopted and not server.running() and _execs_first(server.upstream)
    pid = server._forkserver_pid
    if pid is None:
        return True
    import psutil

    try:  # a server that died and was not reaped yet is a zombie: replaced at the launch
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def starts_by_exec(role: str) -> bool:
    """Whether launching a child of ``role`` under forkserver starts a server's
    interpreter first (see :func:`_execs_first`)."""
    kind = kind_of(role)
    server, root = _servers.get(kind), _servers.get("user")
    if server is None and kind == "database" and root is not None:
        return isinstance(root, SubServer) or _execs_first(root)  # its own, or forked
    return server is None or _execs_first(server)


def fork_preload(settings: Settings, roles: Iterable[str]) -> list[str]:
    """What a process that forks the processes of ``roles`` (those started under fork)
    imports first, for them to share its pages instead of each loading its own copy."""
    from spawnflow.bootstrap import startmethods

    names: list[str] = []
    for role in roles:
        if startmethods.for_role(settings, role)[0] == "fork":
            names += [n for n in PRELOAD[kind_of(role)] if n not in names and n not in _SERVER_ONLY]
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
        if kind in _shared or _adopted(kind):
            continue  # a handed-down one is handed on; ours from it starts with our launch
        if start_early(settings, role):
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
    if isinstance(server, SubServer) and server.adopted:
        server.ensure_running()
        return False
    _ensure_running(server)
    return True


def _ensure_running(server: Any) -> None:
    """Start one of this process's own servers unless it runs (again, if it died)."""
    from spawnflow.bootstrap import startmethods

    execs = _execs_first(server)
    if execs or (isinstance(server, SubServer) and not server.running()):
        startmethods.context("forkserver")  # the socket's folder, before the server starts
        with platforms.current().launching(exec_follows=execs):
            server.ensure_running()


def let_go(role: str) -> None:
    """Let this process's own server for the children of ``role`` go, if it forked it
    from a handed-down one (no other process uses it): for a process that will launch
    none for a while, such as an executor whose last idle worker left. Only once no
    child launched through it runs: the kernel ends them with it."""
    server = _servers.get(kind_of(role))
    if isinstance(server, SubServer) and server.adopted and server.forks_nothing():
        server.let_go()


def handed_down(shared: bool) -> tuple[ServerRef, ...]:
    """What this process hands to a child it launches: the servers it was handed (its
    whole tree forks from them), and with ``shared`` those it shares, started again
    first if one died (a child handed its old address could launch nothing)."""
    for kind in _shared if shared else ():
        _ensure_running(_servers[kind])
    refs = []
    for kind, server in _servers.items():
        if isinstance(server, SubServer):
            ref = server.upstream.ref if server.adopted else server.ref(kind)
            if ref is not None and (server.adopted or (shared and kind in _shared)):
                refs.append(ref)
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

    found: dict[int, psutil.Process] = {}
    for pid in _own_shared_pids():
        try:
            found.update((p.pid, p) for p in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            continue
    # Our servers, forked one from the other, leave when this process does; and what
    # one we do not share forked is our children's tree, not the servers'.
    shared = [_servers[kind] for kind in _shared]
    for server in _servers.values():
        if not isinstance(server, SubServer) or server.adopted or server._handle is None:
            continue
        found.pop(server._handle.pid, None)
        try:
            unshared = [] if server in shared else server._handle.children(recursive=True)
        except psutil.Error:
            unshared = []
        for process in unshared:
            found.pop(process.pid, None)
    spared: list[psutil.Process] = []
    for pid in skip:
        try:
            spared += [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            continue
    left_alone = {process.pid for process in tree(spared)}
    return [process for process in found.values() if process.pid not in left_alone]


def _shared_pids() -> list[int]:
    """The shared servers this process knows: those it started and shares, and those
    it was handed."""
    handed = [s for s in _servers.values() if isinstance(s, SubServer) and s.adopted]
    return [server.upstream.ref.pid for server in handed] + _own_shared_pids()


def _own_shared_pids() -> list[int]:
    """The servers this process started and shares (one of ours forked from the other,
    once gone, is reaped at once: its pid may be another process's)."""
    pids = []
    for kind in _shared:
        server = _servers[kind]
        if isinstance(server, SubServer):
            pid = server.pid if server.running() else None
        else:
            pid = server._forkserver_pid
        pids += [] if pid is None else [pid]
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
