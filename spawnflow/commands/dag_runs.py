"""``spawnflow dags list-runs | state | next-execution``: a Dag's runs, past and next,
under the names Airflow users type (registered on the ``dags`` group)."""

from __future__ import annotations

import click

from spawnflow.commands.completion import dag_id_argument, dag_id_option, run_id_argument
from spawnflow.commands.output import output_option
from spawnflow.commands.state import State, pass_state


@click.command("list-runs", short_help="List a Dag's runs (Airflow's name for `runs list`).")
@dag_id_argument(required=False)
@dag_id_option("-d", "--dag-id", "dag_id_option", help="The Dag, as Airflow 2 spells it.")
@click.option("--limit", default=50, show_default=True, help="At most this many runs.")
@output_option
@pass_state
def list_runs_command(
    state: State, dag_id: str | None, dag_id_option: str | None, limit: int, output: str
) -> None:
    """List the runs of DAG_ID (given as an argument, as in Airflow 3, or with -d, as in
    Airflow 2; neither: every Dag's), newest first: what `spawnflow runs list --dag-id
    DAG_ID` prints."""
    from spawnflow.commands.runs import show_runs

    if dag_id and dag_id_option and dag_id != dag_id_option:
        raise click.UsageError(f"two Dags given: {dag_id!r} and --dag-id {dag_id_option!r}.")
    show_runs(state, dag_id or dag_id_option, limit, output)


@click.command("state", short_help="Print the state of one run of a Dag.")
@dag_id_argument()
@run_id_argument("logical_date_or_run_id", metavar="LOGICAL_DATE_OR_RUN_ID")
@pass_state
def state_command(state: State, dag_id: str, logical_date_or_run_id: str) -> None:
    """Print the state of the run of DAG_ID named by its logical date (ISO 8601, UTC
    unless it has a zone) or its run id (or `latest`, the start of one run id, or the
    run's log folder), as Airflow's `dags state` does."""
    from spawnflow.services import listings

    state.database()
    click.echo(listings.find_run(dag_id, logical_date_or_run_id).state)


@click.command("next-execution", short_help="Print the next logical dates of a Dag's schedule.")
@dag_id_argument()
@click.option("-n", "--num-executions", type=click.IntRange(min=1), default=1,
              show_default=True, help="How many.")  # fmt: skip
@pass_state
def next_execution_command(state: State, dag_id: str, num_executions: int) -> None:
    """Print the logical dates (UTC) of the next runs that the schedule of DAG_ID creates,
    one a line, as Airflow's `dags next-execution` does. Each run is created once its
    data interval has ended, if the scheduler runs then; the first may be due already.
    A Dag without a time schedule (None, or assets) has none, and says so."""
    from spawnflow.services import schedules

    state.database()
    found = schedules.next_runs(dag_id, num_executions)
    if found.paused:
        click.echo(f"Dag {dag_id!r} is paused: the scheduler creates none of these runs "
                   "until it is unpaused.", err=True)  # fmt: skip
    for interval in found.intervals:
        click.echo(interval.start.isoformat())
    if found.intervals:
        return
    described = found.schedule.describe()
    if found.schedule.kind == "manual":
        why = "its schedule is None (it runs only when triggered)"
    elif found.schedule.kind == "assets":
        why = f"it runs when its assets are updated, not at a time ({described})"
    else:
        why = f"its schedule ({described}) creates no more runs"
    click.echo(f"Dag {dag_id!r} has no next logical date: {why}.", err=True)
