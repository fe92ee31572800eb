"""``spawnflow scheduler`` and ``spawnflow standalone``."""

from __future__ import annotations

import sys

import click

from spawnflow.commands.state import (
    State,
    default_dags_folder_made,
    pass_state,
    require_writable_logs,
    take_stop_requests,
)  # fmt: skip


def console_logging(state: State, role: str) -> None:
    """Log to the role's file and to the console, at ``[logging] level`` (INFO: what it does,
    as Airflow's components do; ``--log-level WARNING`` for warnings only)."""
    from spawnflow.bootstrap import logs

    settings = state.settings()
    logs.configure(
        role, level=settings.logging.level, console=True,
        log_file=logs.role_log_file(settings.logging.base_log_folder, role),
    )  # fmt: skip


@click.command("scheduler", short_help="Create Dag runs and run their tasks.")
@click.option("--num-loops", type=click.IntRange(min=1), help="Stop after this many loops.")
@click.option("--exit-when-idle", is_flag=True,
              help="Exit once no Dag run is due or active and no task runs.")  # fmt: skip
@pass_state
def scheduler_command(state: State, num_loops: int | None, exit_when_idle: bool) -> None:
    """Run the scheduler with its local executor: it creates Dag runs from schedules and
    runs their tasks in worker processes under the configured start methods.

    SIGTERM or Ctrl-C lets running tasks finish (up to [core] stop_grace_period);
    a second Ctrl-C stops at once."""
    from spawnflow.bootstrap import lifecycle
    from spawnflow.processors.scheduler.job import Scheduler

    console_logging(state, "scheduler")  # first: waiting out an outage is logged
    take_stop_requests()  # before the wait for the database: a stop ends it
    settings = state.ready_to_work()
    idle = [False]

    def note(summary) -> None:
        idle[0] = summary.idle

    try:
        Scheduler(settings, on_loop=note).run(
            num_loops=num_loops, until=(lambda: idle[0]) if exit_when_idle else None
        )
    except lifecycle.WarmStop:  # a second stop request: stopped at once
        raise click.exceptions.Exit(lifecycle.signal_exit_code() or 130) from None
    stopped_by = lifecycle.signal_exit_code()
    if stopped_by is not None:  # stopped warm: as shells expect after a signal
        raise click.exceptions.Exit(stopped_by)


@click.command("standalone", short_help="Run the Dag processor and the scheduler together.")
@click.option("--exit-when-idle", is_flag=True,
              help="Exit once every component is up and every Dag run that was due "
                   "has finished.")  # fmt: skip
@pass_state
def standalone_command(state: State, exit_when_idle: bool) -> None:
    """Migrate the database if needed, then run the Dag processor and the scheduler (with
    its workers) as child processes, with a status line per component.

    Ctrl-C or SIGTERM stops the whole process tree (warm); a second Ctrl-C stops it
    at once."""
    from spawnflow import xcoms
    from spawnflow.bootstrap import forkservers, lifecycle, startmethods
    from spawnflow.services import database_setup, standalone

    settings = state.settings()
    xcom_backend = xcoms.check(settings)  # a backend that cannot load stops us here
    console_logging(state, "standalone")  # first: waiting out an outage is logged
    require_writable_logs(settings)
    take_stop_requests()  # before the wait for the database: a stop ends it
    # What the whole tree shares: the modules its forked children would each load
    # (fork), the servers its processes fork from (forkserver).
    forkservers.import_preload(forkservers.fork_preload(settings, startmethods.ROLE_COMPONENTS))
    forkservers.share(settings, startmethods.ROLE_COMPONENTS)
    try:
        # In a child: no SQLAlchemy in this process. Its warnings (an outage) show here.
        level = None if state.verbose else "WARNING"
        database = database_setup.prepare(settings, console_level=level)
    except database_setup.DatabaseSetupStopped:
        click.echo("Stopped while waiting for the database.", err=True)
        raise click.exceptions.Exit(lifecycle.signal_exit_code() or 130) from None
    dags_folder = str(settings.core.dags_folder)
    if default_dags_folder_made(settings):
        dags_folder += " (made now)"
    click.echo(f"spawnflow standalone, start method {settings.core.mp_start_method}")
    click.echo(
        f"Database: {database.description}" + (" (migrated now)" if database.migrated else "")
    )
    click.echo(f"Dags:     {dags_folder}")
    click.echo(f"Logs:     {settings.logging.base_log_folder}")
    if not xcom_backend.is_database:
        where = ", through a helper process per task" if xcom_backend.in_helper else ""
        click.echo(f"XComs:    {xcom_backend.name} backend{where}")
    if sys.stdout.isatty():
        outcome = _run_with_live_view(settings, exit_when_idle)
    else:  # piped or redirected: a line whenever a component's status changes
        outcome = standalone.run(settings, exit_when_idle=exit_when_idle, show=click.echo)
    click.echo(f"Done: {outcome.reason}.")
    if outcome.exit_code:
        raise click.exceptions.Exit(outcome.exit_code)


def _run_with_live_view(settings, exit_when_idle: bool):
    """standalone on a terminal: its components' status lines over what ``spawnflow
    status`` shows (read by the scheduler), redrawn in place; what standalone says
    (a component that died, how long stopping took) is printed above the view."""
    from rich.live import Live
    from rich.text import Text

    from spawnflow.commands import status_view
    from spawnflow.services import standalone

    latest = {}
    with Live(Text("starting the components..."), auto_refresh=False, transient=False) as live:

        def on_status(statuses) -> None:
            headline = [
                f"{role}: {statuses[role].text if role in statuses else 'starting'}"
                for role in standalone.COMPONENTS
            ]
            scheduler = statuses.get("scheduler")
            if scheduler is not None and scheduler.snapshot is not None:
                latest["snapshot"] = scheduler.snapshot
            if "snapshot" in latest:
                live.update(status_view.render(latest["snapshot"], headline=headline),
                            refresh=True)  # fmt: skip
            else:  # until the scheduler's first snapshot
                live.update(Text("\n".join(headline)), refresh=True)

        def say(line: str) -> None:
            live.console.print(line, markup=False, highlight=False)

        return standalone.run(settings, exit_when_idle=exit_when_idle, show=say,
                              on_status=on_status)  # fmt: skip
