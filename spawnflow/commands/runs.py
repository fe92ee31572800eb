"""``spawnflow runs list`` (Airflow's ``dags list-runs``: :mod:`.dag_runs`)."""

from __future__ import annotations

import click

from spawnflow.commands.completion import dag_id_option
from spawnflow.commands.groups import Group
from spawnflow.commands.output import emit, output_option, table
from spawnflow.commands.state import State, pass_state


def when(moment) -> str:
    import datetime as dt

    if moment is None:
        return "-"
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S}"


@click.group("runs", cls=Group, short_help="List Dag runs.")
def runs_group() -> None:
    """Dag runs."""


@runs_group.command("list", short_help="List recent Dag runs.")
@dag_id_option("--dag-id", help="Only this Dag's runs.")
@click.option("--limit", default=50, show_default=True, help="At most this many runs.")
@output_option
@pass_state
def list_command(state: State, dag_id: str | None, limit: int, output: str) -> None:
    """List Dag runs, newest first (times in UTC)."""
    show_runs(state, dag_id, limit, output)


def show_runs(state: State, dag_id: str | None, limit: int, output: str) -> None:
    """What ``runs list`` prints (and ``dags list-runs``, its Airflow name)."""
    from spawnflow.services import listings

    state.database()
    records = [
        {"dag_id": r.dag_id, "run_id": r.run_id, "run_type": r.run_type, "state": r.state,
         "logical_date": r.logical_date, "start_date": r.start_date, "end_date": r.end_date}
        for r in listings.list_runs(dag_id, limit)
    ]  # fmt: skip
    rows = [
        [r["dag_id"], r["run_id"], r["run_type"], r["state"], when(r["logical_date"]),
         when(r["start_date"]), when(r["end_date"])]
        for r in records
    ]  # fmt: skip
    headers = ["dag_id", "run_id", "type", "state", "logical date", "started", "ended"]
    emit(output, records, lambda: table(headers, rows), "No Dag runs yet.")
