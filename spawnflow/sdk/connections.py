"""Connections as tasks and XCom backends see them: ``Connection.get("my_s3")``."""

from __future__ import annotations

import msgspec

from spawnflow.comms.tasks import ConnectionData


class Connection(ConnectionData, frozen=True):
    """How to reach an external system, as ``spawnflow connections add`` stored it.

    Read it with :meth:`get` inside a task or an XCom backend: the request goes to the
    task's supervisor, which reads the database; the caller never opens it. Fields:
    ``conn_id``, ``conn_type``, ``host``, ``port``, ``login``, ``password``, ``schema``,
    ``extra`` (a dict); ``repr()`` hides the password.
    """

    @staticmethod
    def get(conn_id: str) -> Connection:
        """The Connection ``conn_id``; KeyError if there is none."""
        from spawnflow.comms.tasks import GetConnection
        from spawnflow.sdk.runtime import ask

        answer = ask(lambda id: GetConnection(id=id, conn_id=conn_id))
        if answer.connection is None:
            raise KeyError(f"there is no Connection {conn_id!r}; see `spawnflow connections list`")
        return Connection(**msgspec.structs.asdict(answer.connection))
