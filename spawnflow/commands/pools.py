"""``spawnflow pools list | get | set | delete``."""

from __future__ import annotations

import click

from spawnflow.commands.groups import Group
from spawnflow.commands.output import emit, emit_one, output_option, pairs, table
from spawnflow.commands.state import State, pass_state


@click.group("pools", cls=Group, short_help="Manage pools: slots that bound running tasks.")
def pools_group() -> None:
    """Pools: a task takes ``pool_slots`` of its pool's slots while queued or running."""


def _row(record: dict) -> list[str]:
    return [record["pool"], str(record["slots"]), str(record["occupied"]),
            "yes" if record["include_deferred"] else "no", record["description"] or ""]  # fmt: skip


HEADERS = ["pool", "slots", "occupied", "include deferred", "description"]


@pools_group.command("list", short_help="List the pools.")
@output_option
@pass_state
def list_command(state: State, output: str) -> None:
    """List every pool, with the slots its queued and running tasks occupy."""
    from spawnflow.services import pools

    state.database()
    found = pools.list_pools()
    emit(output, found, lambda: table(HEADERS, [_row(r) for r in found]), "No pools.")


@pools_group.command("get", short_help="Show one pool.")
@click.argument("name")
@output_option
@pass_state
def get_command(state: State, name: str, output: str) -> None:
    """Show pool NAME."""
    from spawnflow.services import pools

    state.database()
    record = pools.get_pool(name)
    emit_one(output, record, lambda: pairs(list(zip(HEADERS, _row(record), strict=True))))


# ignore_unknown_options: ``set NAME -1`` reaches the slots check, not "no such option".
@pools_group.command(
    "set", short_help="Create a pool or change its slots.",
    context_settings={"ignore_unknown_options": True},
)  # fmt: skip
@click.argument("name")
@click.argument("slots", type=int)
@click.option("--description", help="What the pool is for.")
@click.option(
    "--include-deferred/--exclude-deferred", default=None,
    help="Whether deferred tasks hold slots (new pools: no).",
)  # fmt: skip
@pass_state
def set_command(
    state: State, name: str, slots: int, description: str | None, include_deferred: bool | None
) -> None:
    """Create pool NAME with SLOTS slots, or change it (0 pauses it; running tasks of a
    shrunk pool finish)."""
    from spawnflow.services import pools

    state.database()
    created = pools.set_pool(name, slots, description, include_deferred)
    click.echo(f"Pool {name!r} {'created' if created else 'updated'} with {slots} slots.")


@pools_group.command("delete", short_help="Delete a pool.")
@click.argument("name")
@pass_state
def delete_command(state: State, name: str) -> None:
    """Delete pool NAME (not default_pool); its tasks wait until it exists again."""
    from spawnflow.services import pools

    state.database()
    pools.delete_pool(name)
    click.echo(f"Pool {name!r} deleted.")
