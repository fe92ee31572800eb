"""Messages the roles exchange over the wire protocol of :mod:`spawnflow.bootstrap.wire`.

Framing, the registry and the boot handshake live in ``bootstrap.wire``. Small messages
live here; a role with several has a module of its own (``comms.parsing``). A message
must be imported on both sides of a channel to be decoded.
"""

from __future__ import annotations

from spawnflow.bootstrap.wire import Channel, ErrorResponse, Message, Request, Response
from spawnflow.comms.status import StatusSnapshot

__all__ = [
    "Channel",
    "ComponentStatus",
    "DatabaseNotReady",
    "DatabaseReady",
    "ErrorResponse",
    "Message",
    "ProbeReport",
    "Request",
    "ResourceReport",
    "Response",
]


class ProbeReport(Message, frozen=True):
    """What a doctor probe child found about itself (see ``spawnflow doctor``)."""

    pid: int
    role: str
    log_file: str
    settings: dict
    #: Engines in this process's registry that another process created.
    inherited_engines: int
    #: The server-side connection this child opened itself, or why it could not.
    own_connection: str
    #: What happened when the child used a connection it inherited from its parent:
    #: "refused", "nothing inherited", or what went wrong.
    inherited_use: str
    grandchild_pid: int
    modules: list[str]


class ResourceReport(Message, frozen=True):
    """A process's own view of its resources (benchmarks and health checks)."""

    pid: int
    peak_rss_bytes: int | None
    modules: int
    #: CPU seconds (user and system) the process used so far.
    cpu_seconds: float | None = None


class ComponentStatus(Message, frozen=True):
    """A long-running component's news for its parent (``spawnflow standalone``)."""

    role: str
    #: Turns of its loop so far (passes, for the Dag processor).
    loops: int
    #: Nothing to do and nothing running.
    idle: bool
    text: str
    #: The scheduler's runs that ended since it started, by how they ended.
    succeeded_runs: int = 0
    failed_runs: int = 0
    #: The Dag processor's files with an import error, after its last pass.
    import_errors: int = 0
    #: What ``spawnflow status`` would show, read by the scheduler for ``standalone``'s
    #: live view (whose own process keeps SQLAlchemy out); None unless asked for.
    snapshot: StatusSnapshot | None = None


class DatabaseReady(Message, frozen=True):
    """The database of a tree is reachable, writable and migrated (``standalone``)."""

    #: Where it is and at which revision, as ``spawnflow db`` describes it.
    description: str
    #: Whether this set-up migrated it.
    migrated: bool


class DatabaseNotReady(Message, frozen=True):
    """Why the database could not be made ready: one sentence for the user."""

    message: str
    #: A stop request ended the wait for it (no error of the user's).
    stopped: bool = False
