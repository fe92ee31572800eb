"""Connections: stored by ``spawnflow connections``, read by supervisors for their tasks."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError
from spawnflow.models.lookups import connection_of, read_connection
from spawnflow.models.run import Connection as ConnectionRow
from spawnflow.sdk.connections import Connection
from spawnflow.services.records import NotFound


def from_uri(conn_id: str, uri: str) -> Connection:
    """A Connection from ``type://login:password@host:port/schema?key=value``."""
    parts = urlsplit(uri)
    if not parts.scheme:
        raise UserError(f"connection URI {uri!r} has no type: write it as type://host/...")
    try:
        port = parts.port
    except ValueError:
        raise UserError(f"connection URI {uri!r} has a port that is not a number") from None
    return Connection(
        conn_id=conn_id, conn_type=parts.scheme.replace("-", "_"),
        host=unquote(parts.hostname) if parts.hostname else None, port=port,
        login=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        schema=unquote(parts.path.lstrip("/")) or None, extra=dict(parse_qsl(parts.query)),
    )  # fmt: skip


def parse_extra(text: str | None, where: str) -> dict[str, Any]:
    """The JSON object in ``text``; UserError naming ``where`` if it is not one."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as error:
        raise UserError(f"{where} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise UserError(f"{where} must be a JSON object, not {type(value).__name__}")
    return value


def add_connection(connection: Connection, description: str | None = None) -> None:
    with orm.session_scope() as session:
        if session.get(ConnectionRow, connection.conn_id) is not None:
            raise UserError(f"Connection {connection.conn_id!r} exists; delete it first")
        session.add(ConnectionRow(
            conn_id=connection.conn_id, conn_type=connection.conn_type, host=connection.host,
            port=connection.port, login=connection.login, password=connection.password,
            schema=connection.schema, extra=json.dumps(connection.extra) if connection.extra
            else None, description=description,
        ))  # fmt: skip


def get_connection(conn_id: str) -> Connection:
    found = read_connection(conn_id)
    if found is None:
        raise NotFound(f"there is no Connection {conn_id!r}; see `spawnflow connections list`")
    return found


def list_connections() -> list[tuple[Connection, str | None]]:
    with orm.session_scope(write=False) as session:
        rows = session.scalars(select(ConnectionRow).order_by(ConnectionRow.conn_id))
        return [(connection_of(row), row.description) for row in rows]


def delete_connection(conn_id: str) -> None:
    with orm.session_scope() as session:
        row = session.get(ConnectionRow, conn_id)
        if row is None:
            raise NotFound(f"there is no Connection {conn_id!r}")
        session.delete(row)
