"""``spawnflow dag-processor``."""

from __future__ import annotations

import click

from spawnflow.commands.state import (
    State,
    default_dags_folder_made,
    pass_state,
    take_stop_requests,
)


@click.command("dag-processor", short_help="Parse Dag files and store the Dags they define.")
@click.option("--once", is_flag=True, help="Parse every file once, print a summary, exit.")
@click.option("--num-runs", type=click.IntRange(min=1), help="Stop after this many passes.")
@pass_state
def dag_processor_command(state: State, once: bool, num_runs: int | None) -> None:
    """Run the Dag processor: parse each Dag file in a child process under the configured
    start method and store its Dags, import errors and parse statistics.

    SIGTERM or Ctrl-C lets running parses finish (up to [core] stop_grace_period);
    a second Ctrl-C stops at once."""
    from spawnflow.bootstrap import lifecycle, logs
    from spawnflow.processors.dag_processor.manager import DagFileProcessorManager

    settings = state.settings()
    logs.configure(
        "dag-processor",
        level=settings.logging.level,
        log_file=logs.role_log_file(settings.logging.base_log_folder, "dag-processor"),
        console=True,
    )  # first: waiting out an outage at start-up is logged
    take_stop_requests()  # before the wait for the database: a stop ends it
    state.ready_to_work()
    if default_dags_folder_made(settings):
        click.echo(f"Made the Dags folder {settings.core.dags_folder}.", err=True)
    manager = DagFileProcessorManager(settings)
    try:
        summaries = manager.run(once=once, num_runs=num_runs)
    except lifecycle.WarmStop:
        click.echo("Stopped.", err=True)
        raise click.exceptions.Exit(lifecycle.signal_exit_code() or 130) from None
    if summaries:
        last = summaries[-1]
        parsed = sum(s.parsed for s in summaries)
        click.echo(
            f"{len(summaries)} pass(es), {parsed} parse(s) of {last.files} file(s); now "
            f"{last.dags} Dag(s) and {len(last.errors)} import error(s)."
        )
        for path, error in sorted(last.errors.items()):
            click.echo(f"{path}: {error.splitlines()[-1]}", err=True)
    stopped_by = lifecycle.signal_exit_code()
    if stopped_by is not None:  # stopped warm: as shells expect after a signal
        raise click.exceptions.Exit(stopped_by)
