"""``spawnflow info``."""

import click

from spawnflow.commands.output import emit_one, output_option, pairs
from spawnflow.commands.state import State, pass_state


@click.command("info", short_help="Show version, platform, start methods, paths and database.")
@output_option
@pass_state
def info_command(state: State, output: str) -> None:
    """Show the version, Python, OS, the start methods this machine has (default marked),
    the method each component uses, where config, data and logs live, and the database
    URL with its password hidden."""
    from spawnflow.services import info

    found = info.facts(state.settings())
    emit_one(output, found, lambda: pairs(info.describe(found)))
