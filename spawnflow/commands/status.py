"""``spawnflow status``: a live view of Dags, their newest runs, what is in flight,
import errors and the components' health."""

from __future__ import annotations

import sys
import time

import click

from spawnflow.commands.completion import dag_id_option
from spawnflow.commands.state import State, pass_state


@click.command("status", short_help="A live view of Dags, runs, running tasks and components.")
@dag_id_option("--dag-id", help="Only this Dag (its grid and its tasks in flight).")
@click.option("--runs", "run_count", default=10, show_default=True, type=click.IntRange(1, 100),
              help="Newest runs per Dag in the grid.")  # fmt: skip
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(0.2),
              help="Seconds between two refreshes of the live view.")  # fmt: skip
@click.option("--once", is_flag=True,
              help="Print the view once and exit (as when output is not a terminal).")  # fmt: skip
@pass_state
def status_command(state: State, dag_id: str | None, run_count: int, interval: float,
                   once: bool) -> None:  # fmt: skip
    """Show each Dag's newest runs as a grid of task states (as Airflow's grid view),
    the tasks queued, running or deferred with how long, the import errors, and when
    the scheduler, triggerer and Dag processor last showed signs of life.

    On a terminal the view refreshes every --interval seconds until Ctrl-C; otherwise
    (piped, redirected) it prints once as plain lines."""
    from spawnflow.commands import status_view

    settings = state.database()

    def snapshot():
        from spawnflow.bootstrap import orm
        from spawnflow.models.status import read_status

        with orm.engine().connect() as connection:
            taken = read_status(connection, settings, runs=run_count, dag_id=dag_id)
        if dag_id is not None and not taken.dags:
            from spawnflow.services import dags

            dags.get_dag(dag_id)  # raises, saying why (a typo, a file that does not import)
        return taken

    if once or not sys.stdout.isatty():
        click.echo(status_view.plain_text(status_view.render(snapshot())))
        return
    _live(lambda: status_view.render(snapshot()), interval)


def _live(view, interval: float) -> None:
    """Redraw ``view()`` every ``interval`` seconds until Ctrl-C (exit 0: leaving a view
    is no failure). A database that stops answering is said in the view, which goes on
    trying, instead of ending it."""
    from rich.live import Live
    from rich.text import Text
    from sqlalchemy import exc

    from spawnflow.bootstrap import outage

    with Live(view(), auto_refresh=False, screen=False, transient=False) as live:
        try:
            while True:
                time.sleep(interval)
                try:
                    live.update(view(), refresh=True)
                except exc.SQLAlchemyError as error:
                    live.update(Text(f"spawnflow status: {outage.explain(error)}; trying again"),
                                refresh=True)  # fmt: skip
        except KeyboardInterrupt:
            pass
