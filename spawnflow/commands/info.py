"""``spawnflow info``."""

import click

from spawnflow.commands.output import pairs
from spawnflow.commands.state import State, pass_state


@click.command("info", short_help="Show version, platform, start methods, paths and database.")
@pass_state
def info_command(state: State) -> None:
    """Show the version, Python, OS, the start methods this machine has (default marked),
    the method each component uses, where config, data and logs live, and the database
    URL with its password hidden."""
    from spawnflow.services.info import describe

    click.echo(pairs(describe(state.settings())))
