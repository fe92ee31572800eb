"""``spawnflow triggerer`` and ``spawnflow triggers list``."""

from __future__ import annotations

import click

from spawnflow.commands.groups import Group
from spawnflow.commands.output import table
from spawnflow.commands.state import State, pass_state, take_stop_requests


@click.command("triggerer", short_help="Run the triggers of deferred tasks and asset watchers.")
@click.option("--capacity", type=click.IntRange(min=1),
              help="Triggers to run at once (default: [triggerer] capacity).")  # fmt: skip
@click.option("--num-loops", type=click.IntRange(min=1), help="Stop after this many loops.")
@pass_state
def triggerer_command(state: State, capacity: int | None, num_loops: int | None) -> None:
    """Run a triggerer: it claims the triggers that deferred tasks and asset watchers wait
    for and runs them all on one event loop, in a child process that never opens the
    database. Several triggerers may share the work (PostgreSQL and MariaDB).

    SIGTERM or Ctrl-C stops it: its triggers are handed back for another triggerer; a
    second Ctrl-C stops it at once."""
    from spawnflow.bootstrap import lifecycle
    from spawnflow.commands.scheduler import console_logging
    from spawnflow.processors.triggerer.job import Triggerer

    console_logging(state, "triggerer")  # first: waiting out an outage is logged
    take_stop_requests()  # before the wait for the database: a stop ends it
    settings = state.ready_to_work()
    try:
        Triggerer(settings, capacity=capacity).run(num_loops=num_loops)
    except lifecycle.WarmStop:  # a second stop request: stopped at once
        raise click.exceptions.Exit(lifecycle.signal_exit_code() or 130) from None
    stopped_by = lifecycle.signal_exit_code()
    if stopped_by is not None:  # stopped warm: as shells expect after a signal
        raise click.exceptions.Exit(stopped_by)


@click.group(
    "triggers", cls=Group, short_help="See the triggers that tasks and asset watchers wait for."
)
def triggers_group() -> None:
    """Triggers: what deferred tasks and asset watchers wait for, run by a triggerer."""


@triggers_group.command("list", short_help="List the triggers.")
@pass_state
def list_command(state: State) -> None:
    """List every trigger: its class, the triggerer running it, who waits for it, since when."""
    from spawnflow.services import triggers

    state.database()
    rows = [
        [str(t.trigger_id), t.classpath.rsplit(".", 1)[-1], t.triggerer or "(none yet)",
         t.owner, t.since.strftime("%Y-%m-%d %H:%M:%S")]
        for t in triggers.list_triggers()
    ]  # fmt: skip
    headers = ["id", "trigger", "triggerer", "waited for by", "since (UTC)"]
    click.echo(table(headers, rows) if rows else "No triggers.")
