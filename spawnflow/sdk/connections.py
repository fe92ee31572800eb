"""Connections as tasks and XCom backends see them: ``Connection.get("my_s3")``."""

from __future__ import annotations

from typing import Any

import msgspec


class Connection(msgspec.Struct, frozen=True):
    """How to reach an external system, as ``spawnflow connections add`` stored it.

    Read it with :meth:`get` inside a task or an XCom backend: the request goes to the
    task's supervisor, which reads the database; the caller never opens it.
    """

    conn_id: str
    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = None
    schema: str | None = None
    extra: dict[str, Any] = msgspec.field(default_factory=dict)

    @staticmethod
    def get(conn_id: str) -> Connection:
        """The Connection ``conn_id``; KeyError if there is none."""
        from spawnflow.comms.tasks import GetConnection
        from spawnflow.sdk.runtime import _call

        answer = _call(lambda id: GetConnection(id=id, conn_id=conn_id))
        if answer.connection is None:
            raise KeyError(f"there is no Connection {conn_id!r}; see `spawnflow connections list`")
        return answer.connection

    def __repr__(self) -> str:  # the password stays out of logs and tracebacks
        shown = "***" if self.password else None
        return (f"Connection(conn_id={self.conn_id!r}, conn_type={self.conn_type!r}, "
                f"host={self.host!r}, port={self.port!r}, login={self.login!r}, "
                f"password={shown!r}, schema={self.schema!r})")  # fmt: skip
