"""``spawnflow connections add | get | list | delete``."""

from __future__ import annotations

import click

from spawnflow.commands.groups import Group
from spawnflow.commands.output import emit, output_option, pairs, table
from spawnflow.commands.state import State, pass_state


@click.group(
    "connections", cls=Group, short_help="Manage Connections that tasks and backends read."
)
def connections_group() -> None:
    """Connections: how tasks and XCom backends reach external systems, read with
    ``Connection.get(conn_id)`` through the task's supervisor."""


@connections_group.command("add", short_help="Add a Connection.")
@click.argument("conn_id")
@click.option("--uri", help="All at once: type://login:password@host:port/schema?key=value.")
@click.option("--conn-type", help="What it connects to (s3, postgres, http, ...).")
@click.option("--host")
@click.option("--port", type=int)
@click.option("--login")
@click.option("--password")
@click.option("--schema")
@click.option("--extra", help="Further options as a JSON object.")
@click.option("--description", help="What the Connection is for.")
@pass_state
def add_command(state: State, conn_id: str, uri: str | None, conn_type: str | None,
                host: str | None, port: int | None, login: str | None, password: str | None,
                schema: str | None, extra: str | None,
                description: str | None) -> None:  # fmt: skip
    """Add CONN_ID, from --uri or from --conn-type and the other options."""
    from spawnflow.bootstrap.errors import UserError
    from spawnflow.sdk.connections import Connection
    from spawnflow.services import connections

    state.database()
    if uri and conn_type:
        raise UserError("give either --uri or --conn-type, not both")
    if uri:
        connection = connections.from_uri(conn_id, uri)
    elif conn_type:
        connection = Connection(
            conn_id=conn_id, conn_type=conn_type, host=host, port=port, login=login,
            password=password, schema=schema,
            extra=connections.parse_extra(extra, "the --extra option"),
        )  # fmt: skip
    else:
        raise UserError("give the Connection's --uri or its --conn-type")
    connections.add_connection(connection, description)
    click.echo(f"Connection {conn_id!r} added.")


@connections_group.command("get", short_help="Show a Connection (password hidden).")
@click.argument("conn_id")
@pass_state
def get_command(state: State, conn_id: str) -> None:
    """Show CONN_ID; the password is not printed."""
    from spawnflow.services import connections

    state.database()
    found = connections.get_connection(conn_id)
    click.echo(pairs([
        ("conn_id", found.conn_id), ("conn_type", found.conn_type), ("host", found.host or ""),
        ("port", "" if found.port is None else str(found.port)), ("login", found.login or ""),
        ("password", "***" if found.password else ""), ("schema", found.schema or ""),
        ("extra", ", ".join(sorted(found.extra)) if found.extra else ""),
    ]))  # fmt: skip


@connections_group.command("list", short_help="List the Connections.")
@output_option
@pass_state
def list_command(state: State, output: str) -> None:
    """List every Connection (passwords are not shown)."""
    from spawnflow.services import connections

    state.database()
    found = connections.list_connections()
    records = [
        {"conn_id": c.conn_id, "conn_type": c.conn_type, "host": c.host, "port": c.port,
         "description": description}
        for c, description in found
    ]  # fmt: skip
    rows = [[c.conn_id, c.conn_type, c.host or "", description or ""]
            for c, description in found]  # fmt: skip
    emit(output, records, lambda: table(["conn_id", "type", "host", "description"], rows),
         "No Connections.")  # fmt: skip


@connections_group.command("delete", short_help="Delete a Connection.")
@click.argument("conn_id")
@pass_state
def delete_command(state: State, conn_id: str) -> None:
    """Delete CONN_ID."""
    from spawnflow.services import connections

    state.database()
    connections.delete_connection(conn_id)
    click.echo(f"Connection {conn_id!r} deleted.")
