"""``spawnflow variables set | get | list | delete``."""

from __future__ import annotations

import click

from spawnflow.commands.groups import Group
from spawnflow.commands.output import emit, output_option, table
from spawnflow.commands.state import State, pass_state


@click.group("variables", cls=Group, short_help="Manage Variables that tasks can read.")
def variables_group() -> None:
    """Variables: named values tasks read with ``Variable.get(key)``."""


@variables_group.command("set", short_help="Set a Variable.")
@click.argument("key")
@click.argument("value")
@click.option("--description", help="What the Variable is for.")
@pass_state
def set_command(state: State, key: str, value: str, description: str | None) -> None:
    """Set KEY to VALUE."""
    from spawnflow.services import runs

    state.database()
    runs.set_variable(key, value, description)
    click.echo(f"Variable {key!r} set.")


@variables_group.command("get", short_help="Print a Variable's value.")
@click.argument("key")
@pass_state
def get_command(state: State, key: str) -> None:
    """Print the value of KEY."""
    from spawnflow.services import runs

    state.database()
    click.echo(runs.get_variable(key))


@variables_group.command("list", short_help="List the Variables.")
@output_option
@pass_state
def list_command(state: State, output: str) -> None:
    """List every Variable (long values shortened in the table only)."""
    from spawnflow.services import runs

    state.database()
    found = runs.list_variables()
    records = [{"key": v.key, "value": v.value, "description": v.description} for v in found]
    rows = [[v.key, v.value if len(v.value) < 60 else v.value[:57] + "...", v.description or ""]
            for v in found]  # fmt: skip
    emit(output, records, lambda: table(["key", "value", "description"], rows), "No Variables.")


@variables_group.command("delete", short_help="Delete a Variable.")
@click.argument("key")
@pass_state
def delete_command(state: State, key: str) -> None:
    """Delete KEY."""
    from spawnflow.services import runs

    state.database()
    runs.delete_variable(key)
    click.echo(f"Variable {key!r} deleted.")
