"""Variable and Connection reads, for the processes that may open the database.

Task processes and XCom helpers ask their supervisor, which answers from here; the
``variables`` and ``connections`` commands read through here too.
"""

from __future__ import annotations

import json

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.models.run import Connection as ConnectionRow
from spawnflow.models.run import Variable
from spawnflow.sdk.connections import Connection


def read_variable(key: str) -> str | None:
    """The Variable's value, or None if there is no such Variable."""
    with orm.session_scope(write=False) as session:
        return session.scalar(select(Variable.value).where(Variable.key == key))


def read_connection(conn_id: str) -> Connection | None:
    """The Connection ``conn_id`` as tasks get it, or None."""
    with orm.session_scope(write=False) as session:
        row = session.get(ConnectionRow, conn_id)
        return None if row is None else connection_of(row)


def connection_of(row: ConnectionRow) -> Connection:
    """The SDK's Connection for a stored row."""
    return Connection(
        conn_id=row.conn_id, conn_type=row.conn_type, host=row.host, port=row.port,
        login=row.login, password=row.password, schema=row.schema,
        extra=json.loads(row.extra) if row.extra else {},
    )  # fmt: skip
