"""``spawnflow assets list | show | events | event``."""

from __future__ import annotations

import json

import click

from spawnflow.commands.groups import Group
from spawnflow.commands.output import pairs, table
from spawnflow.commands.state import State, pass_state


@click.group("assets", cls=Group, short_help="See assets and record their updates.")
def assets_group() -> None:
    """Assets: data that Dags produce (a task's ``outlets``) and are scheduled on
    (``schedule=Asset(...)``)."""


@assets_group.command("list", short_help="List the assets.")
@pass_state
def list_command(state: State) -> None:
    """List every asset with the Dags that produce and consume it."""
    from spawnflow.services import assets

    state.database()
    rows = [
        [a.uri, a.name if a.name != a.uri else "", a.group, "yes" if a.active else "no",
         ", ".join(a.producers), ", ".join(a.consumers), str(a.events)]
        for a in assets.list_assets()
    ]  # fmt: skip
    headers = ["uri", "name", "group", "active", "produced by", "consumed by", "events"]
    click.echo(table(headers, rows) if rows else "No assets.")


@assets_group.command("show", short_help="Show one asset.")
@click.argument("uri")
@pass_state
def show_command(state: State, uri: str) -> None:
    """Show the asset URI."""
    from spawnflow.services import assets

    state.database()
    found = assets.show_asset(uri)
    click.echo(pairs([
        ("URI", found.uri), ("Name", found.name), ("Group", found.group),
        ("Active", "yes" if found.active else "no"),
        ("Produced by", ", ".join(found.producers) or "-"),
        ("Consumed by", ", ".join(found.consumers) or "-"), ("Events", str(found.events)),
    ]))  # fmt: skip


@assets_group.command("events", short_help="List an asset's events.")
@click.argument("uri")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1))
@pass_state
def events_command(state: State, uri: str, limit: int) -> None:
    """List the newest events of the asset URI."""
    from spawnflow.services import assets

    state.database()
    rows = [
        [str(e.id), e.timestamp.isoformat(timespec="seconds"), e.partition_key or "",
         ".".join(p for p in (e.source_dag_id, e.source_task_id) if p) or "(outside)", e.extra]
        for e in assets.list_events(uri, limit)
    ]  # fmt: skip
    headers = ["id", "timestamp", "partition", "source", "extra"]
    click.echo(table(headers, rows) if rows else f"No events for {uri}.")


@assets_group.command("event", short_help="Record that an asset was updated.")
@click.argument("uri")
@click.option("--partition", "partition_key", help="The partition that was updated.")
@click.option("--extra", help="A JSON object to attach to the event.")
@pass_state
def event_command(state: State, uri: str, partition_key: str | None, extra: str | None) -> None:
    """Record an update of the asset URI made outside spawnflow; Dags scheduled on it
    are evaluated at the scheduler's next loop."""
    from spawnflow.services import assets

    state.database()
    event = assets.record_event(uri, partition_key, extra)
    where = f" (partition {partition_key!r})" if partition_key else ""
    click.echo(f"Event {event.id} recorded for {uri}{where}; extra {json.loads(event.extra)}.")
