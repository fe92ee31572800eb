"""``spawnflow xcom list | get``: XComs of a run, resolved through the configured backend."""

from __future__ import annotations

import click

from spawnflow.commands.completion import (
    dag_id_argument,
    run_id_argument,
    task_id_argument,
    task_id_option,
)
from spawnflow.commands.groups import Group
from spawnflow.commands.output import emit, emit_one, map_index_cell, output_option, table
from spawnflow.commands.state import State, pass_state


@click.group("xcom", cls=Group, short_help="Show the XComs of a Dag run.")
def xcom_group() -> None:
    """XComs: values tasks pushed, read through the configured XCom backend."""


def _shown(value: object, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


@xcom_group.command("list", short_help="List a run's XComs and where each is stored.")
@dag_id_argument()
@run_id_argument()
@task_id_option("--task-id", help="Only this task's XComs.")
@output_option
@pass_state
def list_command(state: State, dag_id: str, run_id: str, task_id: str | None, output: str) -> None:
    """List the XComs of run RUN_ID of DAG_ID: task (and map index, in a run with mapped
    tasks), key, where the value is stored (the database, or the backend's reference)
    and the value itself."""
    from spawnflow.services import xcoms

    settings = state.database()
    entries = xcoms.list_xcoms(settings, dag_id, run_id, task_id)
    records = [{"task_id": e.task_id, "map_index": e.map_index, "key": e.key,
                "stored_in": e.stored_in, "value": e.value, "error": e.error}
               for e in entries]  # fmt: skip
    mapped = any(e.map_index >= 0 for e in entries)  # then a map index column
    rows = [[e.task_id, *([map_index_cell(e.map_index)] if mapped else []), e.key,
             e.stored_in, f"(unreadable: {e.error})" if e.error else _shown(e.value)]
            for e in entries]  # fmt: skip
    headers = ["task", *(["map index"] if mapped else []), "key", "stored in", "value"]
    emit(output, records, lambda: table(headers, rows), "No XComs.")


@xcom_group.command("get", short_help="Print one XCom's value and where it is stored.")
@dag_id_argument()
@run_id_argument()
@task_id_argument()
@click.argument("key", default="return_value")
@click.option("--map-index", type=click.IntRange(min=-1), default=-1, show_default=True,
              help="Which instance of a mapped task (-1: an unmapped task).")  # fmt: skip
@output_option
@pass_state
def get_command(state: State, dag_id: str, run_id: str, task_id: str, key: str,
                map_index: int, output: str) -> None:  # fmt: skip
    """Print the value TASK_ID (its instance --map-index N, for a mapped task) pushed
    under KEY (default: return_value) in run RUN_ID. A value that cannot be read exits 1
    (with --output json or yaml, after the XCom's record, whose error says why)."""
    from spawnflow.bootstrap.errors import UserError
    from spawnflow.services import xcoms

    settings = state.database()
    entry = xcoms.get_xcom(settings, dag_id, run_id, task_id, key, map_index)
    record = {"task_id": entry.task_id, "map_index": entry.map_index, "key": entry.key,
              "stored_in": entry.stored_in, "value": entry.value, "error": entry.error}  # fmt: skip

    def as_text() -> str:
        value = "" if entry.error else f"\nvalue: {entry.value!r}"
        return f"stored in: {entry.stored_in}{value}"

    emit_one(output, record, as_text)
    if entry.error:
        raise UserError(f"XCom {key!r} of task {task_id!r} cannot be read: {entry.error}")
