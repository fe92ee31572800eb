"""``spawnflow db migrate | check | reset``."""

from __future__ import annotations

import click

from spawnflow.commands.groups import Group
from spawnflow.commands.state import State, pass_state


@click.group("db", cls=Group, short_help="Create, check or reset the metadata database.")
def db_group() -> None:
    """Manage the metadata database's schema (Alembic migrations)."""


@db_group.command("migrate", short_help="Create or upgrade the tables.")
@pass_state
def migrate_command(state: State) -> None:
    """Create the tables, or upgrade them to this version of spawnflow."""
    from spawnflow.models import schema

    state.settings()
    before, after = schema.migrate()
    if before == after.current:
        click.echo(f"Nothing to do: {after.describe()}.")
    else:
        click.echo(f"Migrated from {before or 'empty'} to {after.current}: {after.describe()}.")


@db_group.command("check", short_help="Exit non-zero unless the schema is current.")
@pass_state
def check_command(state: State) -> None:
    """Check that the database is reachable and migrated to this version."""
    from spawnflow.models import schema

    state.settings()
    click.echo(f"OK: {schema.require_current().describe()}.")


@db_group.command("reset", short_help="Drop every spawnflow table and migrate again.")
@click.confirmation_option(
    "--yes", prompt="This deletes everything spawnflow stored in this database. Continue?",
    help="Do not ask for confirmation.",
)  # fmt: skip
@pass_state
def reset_command(state: State) -> None:
    """Drop every spawnflow table and create them again, empty."""
    from spawnflow.models import schema

    state.settings()
    click.echo(f"Reset: {schema.reset().describe()}.")
