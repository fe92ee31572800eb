"""``spawnflow backfills list | cancel``: the backfills ``spawnflow dags backfill`` made."""

from __future__ import annotations

import click

from spawnflow.commands.completion import dag_id_argument, dag_id_option
from spawnflow.commands.groups import Group
from spawnflow.commands.output import emit, output_option, table
from spawnflow.commands.state import State, pass_state


@click.group("backfills", cls=Group, short_help="List or cancel backfills.")
def backfills_group() -> None:
    """Backfills: what `spawnflow dags backfill` recorded, and their runs' progress."""


HEADERS = ["id", "dag_id", "from", "to", "runs", "succeeded", "failed", "running", "queued",
           "completed"]  # fmt: skip


def _row(record: dict) -> list[str]:
    completed = record["completed_at"]
    return [str(record["id"]), record["dag_id"], record["from_date"].isoformat(),
            record["to_date"].isoformat(), *(str(record[key]) for key in (
                "runs", "succeeded", "failed", "running", "queued")),
            completed.isoformat(timespec="seconds") if completed else "no"]  # fmt: skip


@backfills_group.command("list", short_help="List the backfills, newest first.")
@dag_id_option("-d", "--dag-id", help="Only this Dag's.")
@output_option
@pass_state
def list_command(state: State, dag_id: str | None, output: str) -> None:
    """List the backfills, newest first: their range, their runs by state, and when
    they completed."""
    from spawnflow.services import backfills

    state.database()
    found = backfills.list_backfills(dag_id)
    emit(output, found, lambda: table(HEADERS, [_row(r) for r in found]), "No backfills.")


@backfills_group.command("cancel", short_help="Cancel a Dag's unfinished backfill.")
@dag_id_argument()
@pass_state
def cancel_command(state: State, dag_id: str) -> None:
    """Cancel DAG_ID's unfinished backfill: its runs that have not started end failed,
    its running runs finish, and another range may be backfilled."""
    from spawnflow.services import backfills

    state.database()
    done = backfills.cancel(dag_id)
    click.echo(
        f"Cancelled backfill {done.backfill_id} of Dag {dag_id!r} "
        f"({done.from_date:%Y-%m-%d} to {done.to_date:%Y-%m-%d}): {done.failed_runs} run(s) "
        f"that had not started failed, {done.running_runs} running run(s) finish."
    )
