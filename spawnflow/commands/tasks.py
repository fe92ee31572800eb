"""``spawnflow tasks list | test | render | states | logs | clear | mark-failed``."""

from __future__ import annotations

import datetime as dt
import time

import click

from spawnflow.bootstrap.errors import UserError
from spawnflow.commands.completion import (
    dag_id_argument,
    run_id_argument,
    run_id_option,
    task_id_argument,
)
from spawnflow.commands.groups import Group
from spawnflow.commands.output import emit, map_index_cell, output_option, table
from spawnflow.commands.runs import when
from spawnflow.commands.state import State, pass_state


@click.group("tasks", cls=Group, short_help="Run, inspect and change task instances.")
def tasks_group() -> None:
    """Task instances."""


@tasks_group.command("test", short_help="Run one task now, writing no state.")
@dag_id_argument()
@task_id_argument()
@click.option("--xcom", "xcoms", multiple=True, metavar="TASK[.KEY]=JSON",
              help="An upstream XCom the task pulls (KEY defaults to return_value); "
                   "repeatable.")  # fmt: skip
@click.option(
    "--strict",
    is_flag=True,
    help="Fail the task when it pulls an upstream XCom that was not given.",
)
@click.option("--map-index", type=click.IntRange(min=0), default=None,
              help="Which element of a mapped task to run (default: the first).")  # fmt: skip
@pass_state
def test_command(
    state: State,
    dag_id: str,
    task_id: str,
    xcoms: tuple[str, ...],
    strict: bool,
    map_index: int | None,
) -> None:
    """Run one task once in a task process (under the executor's start method), ignoring its
    dependencies and writing nothing to the database; show its log and its XComs. An
    upstream XCom it pulls is None unless given with --xcom (a warning says so; --strict
    fails the task instead). A mapped task runs one element, the first unless --map-index
    says which."""
    from spawnflow.comms.states import TaskState
    from spawnflow.sdk import xcom
    from spawnflow.services import runs, testing

    upstream = dict(_upstream_xcom(text) for text in xcoms)
    settings = state.database()
    result = testing.test_task(settings, dag_id, task_id, click.echo, upstream=upstream,
                               strict=strict, map_index=map_index)  # fmt: skip
    for line in runs.read_log(result.log_file)[0]:
        click.echo(line)
    for key, value in result.xcoms.items():
        click.echo(f"XCom {key}: {xcom.decode(value)!r}")
    click.echo(
        f"Task {task_id!r}: {result.state}" + (f" ({result.reason})" if result.reason else "")
    )
    if result.missing and not strict:
        names = ", ".join(dict.fromkeys(result.missing))
        click.echo(f"Warning: the task read upstream XComs nobody gave as None: {names} "
                   "(give them with --xcom TASK[.KEY]=JSON, or fail with --strict).",
                   err=True)  # fmt: skip
    if result.state != TaskState.SUCCESS:
        raise click.exceptions.Exit(1)


def _upstream_xcom(text: str) -> tuple[tuple[str, str], str]:
    """``TASK[.KEY]=JSON`` as ((task, key), the value's JSON text)."""
    import json

    name, sep, value = text.partition("=")
    task_id, _, key = name.strip().partition(".")
    if not sep or not task_id:
        raise click.BadParameter(f"{text!r} is not TASK[.KEY]=JSON", param_hint="--xcom")
    try:
        json.loads(value)
    except ValueError as error:
        raise click.BadParameter(f"the value of {name!r} is not JSON: {error}",
                                 param_hint="--xcom") from None  # fmt: skip
    return (task_id, key or "return_value"), value


@tasks_group.command("states", short_help="Show the task instances of a run.")
@dag_id_argument()
@run_id_argument()
@output_option
@pass_state
def states_command(state: State, dag_id: str, run_id: str, output: str) -> None:
    """Show each task instance of a run: state, try, times and why it ended so. A run with
    mapped tasks gets a map index column (an element's index; blank for unmapped tasks)."""
    from spawnflow.services import listings

    state.database()
    records = [
        {"task_id": ti.task_id, "map_index": ti.map_index, "state": ti.state,
         "try_number": ti.try_number, "start_date": ti.start_date, "end_date": ti.end_date,
         "reason": ti.reason}
        for ti in listings.task_instances(dag_id, run_id)
    ]  # fmt: skip
    mapped = any(r["map_index"] >= 0 for r in records)
    rows = [
        [r["task_id"], *([map_index_cell(r["map_index"])] if mapped else []), r["state"],
         str(r["try_number"]), when(r["start_date"]), when(r["end_date"]), r["reason"] or ""]
        for r in records
    ]  # fmt: skip
    headers = ["task", *(["map index"] if mapped else []), "state", "try", "started", "ended",
               "reason"]  # fmt: skip
    emit(output, records, lambda: table(headers, rows), "The run has no task instances.")


@tasks_group.command("logs", short_help="Print the log of a task's try.")
@dag_id_argument()
@run_id_argument()
@task_id_argument()
@click.option("--attempt", type=click.IntRange(min=1), help="Which try (default: the latest).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the try ends.")
@click.option("--map-index", type=click.IntRange(min=-1), default=-1, show_default=True,
              help="Which element of a mapped task (-1: an unmapped task).")  # fmt: skip
@pass_state
def logs_command(state: State, dag_id: str, run_id: str, task_id: str, attempt: int | None,
                 follow: bool, map_index: int) -> None:  # fmt: skip
    """Print the log of one try of a task (of one element of a mapped task, with
    --map-index): its own log lines, its stdout and stderr, and what its supervisor did."""
    from spawnflow.comms.states import TaskState
    from spawnflow.services import runs

    settings = state.database()
    path, ti_state = runs.log_path(settings, dag_id, run_id, task_id, attempt, map_index)
    if not path.exists() and ti_state not in TaskState.ACTIVE:
        remote = runs.read_remote_log(settings, path)
        if remote is None:
            raise UserError(f"the log of task {task_id!r} is missing: there is no {path}")
        click.echo(f"There is no {path} here: reading the copy at {remote[0]}.", err=True)
        for line in remote[1]:
            click.echo(line)
        return
    offset = 0
    while True:
        lines, offset = runs.read_log(path, offset)
        for line in lines:
            click.echo(line)
        if not follow:
            break
        ti_state = runs.log_path(settings, dag_id, run_id, task_id, attempt, map_index)[1]
        if ti_state not in TaskState.ACTIVE:
            for line in runs.read_log(path, offset)[0]:
                click.echo(line)
            break
        time.sleep(0.5)  # polling a file someone else appends to


@tasks_group.command("clear", short_help="Make task instances run again.")
@dag_id_argument()
@run_id_argument()
@task_id_argument("task_ids", nargs=-1, required=True)
@click.option("--map-index", type=click.IntRange(min=0), default=None,
              help="Only this instance of a mapped task (default: it expands again).")  # fmt: skip
@pass_state
def clear_command(state: State, dag_id: str, run_id: str, task_ids: tuple[str, ...],
                  map_index: int | None) -> None:  # fmt: skip
    """Clear task instances: their state and XComs go, their retries start over, and the
    scheduler runs them again. A running one is stopped within one heartbeat. A mapped
    task is cleared whole and expands again once its upstream tasks are done (the list
    may have another length now); with --map-index, only that instance runs again."""
    from spawnflow.services import runs

    state.database()
    cleared = runs.clear(dag_id, run_id, list(task_ids), map_index)
    click.echo(f"Cleared {', '.join(cleared)}.")
    if cleared.purge_failures:
        raise UserError(
            f"the task instances were cleared, but the XCom backend could not delete "
            f"{len(cleared.purge_failures)} stored value(s), left in place: "
            + "; ".join(cleared.purge_failures)
        )


@tasks_group.command("mark-failed", short_help="Fail a task instance now.")
@dag_id_argument()
@run_id_argument()
@task_id_argument()
@click.option("--map-index", type=click.IntRange(min=-1), default=-1, show_default=True,
              help="Which instance of a mapped task (-1: an unmapped task).")  # fmt: skip
@pass_state
def mark_failed_command(state: State, dag_id: str, run_id: str, task_id: str,
                        map_index: int) -> None:  # fmt: skip
    """Mark a task instance failed (one instance of a mapped task, with --map-index). If
    it is running, its supervisor stops its process within one heartbeat."""
    from spawnflow.services import runs

    state.database()
    previous = runs.mark_failed(dag_id, run_id, task_id, map_index)
    which = f"{task_id!r}" if map_index < 0 else f"{task_id!r} [{map_index}]"
    click.echo(f"Task {which} marked failed (it was {previous}).")


@tasks_group.command("list", short_help="Print the task ids of a Dag.")
@dag_id_argument()
@pass_state
def list_command(state: State, dag_id: str) -> None:
    """Print the ids of the tasks of DAG_ID, one a line, in the order they can run (as
    `dags show` lists them; Airflow's `tasks list`)."""
    from spawnflow.services import dags

    state.database()
    for task in dags.get_dag(dag_id)[1].tasks:
        click.echo(task.task_id)


@tasks_group.command("render", short_help="Print a task's templates rendered for a run.")
@dag_id_argument()
@task_id_argument()
@click.option("--logical-date", "logical_date", metavar="DATE",
              help="Render for this logical date (ISO 8601, UTC unless it says): its run's "
                   "conf and XComs if it has one; without one, the data interval is the "
                   "date itself and XComs are None.")  # fmt: skip
@run_id_option(
    "--run-id", "run_id", help="Render for this run (any spelling runs list shows, or 'latest')."
)
@pass_state
def render_command(state: State, dag_id: str, task_id: str, logical_date: str | None,
                   run_id: str | None) -> None:  # fmt: skip
    """Print each template field of a task ({{ ds }}, {{ params.x }}, {{ var.value.KEY }},
    {{ ti.xcom_pull(...) }}...) rendered for a run, without running the task: a task
    process imports the Dag file and renders them, reading Variables, Connections and
    the run's stored XComs. Without --run-id or --logical-date: the Dag's latest run (now,
    if it has none). Secrets the templates read show as ***."""
    from spawnflow.services import rendering

    if logical_date is not None and run_id is not None:
        raise click.UsageError("give --logical-date or --run-id, not both")
    moment = None if logical_date is None else _logical_date(logical_date)
    settings = state.database()
    result = rendering.render(settings, dag_id, task_id, run_id=run_id, logical_date=moment)
    if result.failure is not None:
        raise UserError(
            f"task {task_id!r} of Dag {dag_id!r} could not be rendered: {result.failure} "
            f"(the task process's log: {result.log_file})"
        )
    if not result.fields:
        click.echo(f"Task {task_id!r} has no template fields.")
    for field, text in result.fields.items():
        click.echo(f"# {field}")
        click.echo(text)


def _logical_date(text: str) -> dt.datetime:
    """``text`` (ISO 8601; without a zone, UTC) as an aware datetime in UTC."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 date or time",
                                 param_hint="--logical-date") from None  # fmt: skip
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC)
