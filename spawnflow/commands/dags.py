"""``spawnflow dags list | show | list-import-errors | report | pause | unpause | check``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from spawnflow.commands.completion import dag_id_argument
from spawnflow.commands.groups import Group
from spawnflow.commands.output import (
    children_print_to_stderr,
    emit,
    emit_one,
    output_option,
    pairs,
    table,
)
from spawnflow.commands.state import State, pass_state

if TYPE_CHECKING:
    from spawnflow.sdk.serialize import SerializedDag
    from spawnflow.services.dag_check import MethodParse, Report


@click.group("dags", cls=Group, short_help="List, inspect, pause and check Dags.")
def dags_group() -> None:
    """Work with the Dags the Dag processor found."""


def _utc(moment) -> str:
    """A stored time in UTC: PostgreSQL answers in the session's zone, SQLite naive."""
    import datetime as dt

    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S}"


def _where(path: str) -> str:
    """A Dag file's path, shortened under the current folder."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


@dags_group.command("list", short_help="List the Dags.")
@click.option("--all", "include_inactive", is_flag=True, help="Include inactive Dags.")
@output_option
@pass_state
def list_command(state: State, include_inactive: bool, output: str) -> None:
    """List the Dags the Dag processor stored, with their schedule and state."""
    from spawnflow.services import listings

    state.database()
    records = [
        {"dag_id": found.dag_id, "schedule": found.schedule, "is_paused": bool(found.is_paused),
         "is_active": bool(found.is_active), "tags": listings.tags_of(found),
         "fileloc": found.fileloc}
        for found in listings.list_dags(include_inactive)
    ]  # fmt: skip
    rows = [
        [r["dag_id"], r["schedule"], _yes(r["is_paused"]), _yes(r["is_active"]),
         ", ".join(r["tags"]), _where(r["fileloc"])]
        for r in records
    ]  # fmt: skip
    headers = ["dag_id", "schedule", "paused", "active", "tags", "file"]
    emit(output, records, lambda: table(headers, rows),
         "No Dags yet: run `spawnflow dag-processor --once`.")  # fmt: skip


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


@dags_group.command("show", short_help="Show one Dag and its tasks.")
@dag_id_argument()
@output_option
@pass_state
def show_command(state: State, dag_id: str, output: str) -> None:
    """Show a Dag's settings and its tasks in the order they can run."""
    import datetime as dt

    import msgspec

    from spawnflow.services import dags

    state.database()
    model, document = dags.get_dag(dag_id)
    # Every field of the stored Dag, typed; the schedule in words, as `dags list` has it.
    stored = msgspec.to_builtins(document, builtin_types=(dt.datetime,))
    record = {"dag_id": dag_id, "is_paused": bool(model.is_paused),
              "is_active": bool(model.is_active), **stored,
              "schedule": document.schedule.describe()}  # fmt: skip

    def as_text() -> str:
        settings = pairs([
            ("Dag", document.dag_id),
            ("Description", document.description or ""),
            ("File", document.fileloc),
            ("Schedule", document.schedule.describe()),
            ("Start date", document.start_date.isoformat() if document.start_date else ""),
            ("Catchup", _yes(document.catchup)),
            ("Paused", _yes(model.is_paused)),
            ("Active", _yes(model.is_active)),
            ("Max active runs", str(document.max_active_runs)),
            ("Tags", ", ".join(document.tags)),
        ])  # fmt: skip
        rows = _task_rows(document)
        return (
            settings + "\n\n" + table(["task", "kind", "trigger rule", "retries", "upstream"], rows)
        )

    emit_one(output, record, as_text)


def _task_rows(document: SerializedDag) -> list[list[str]]:
    """One row per task in the order they can run; in a Dag with task groups, each group
    is a row of its own (``extract/``) with its tasks and groups indented under it, in
    the order their first task can run."""
    Node = dict[str, Any]  # {"tasks": [...], "groups": {group id: Node}, "order": [...]}
    tree: Node = {"order": [], "groups": {}}
    for task in document.tasks:
        node = tree
        for group_id in task.groups:
            if group_id not in node["groups"]:
                node["groups"][group_id] = {"order": [], "groups": {}}
                node["order"].append(("group", group_id))
            node = node["groups"][group_id]
        node["order"].append(("task", task))
    rows: list[list[str]] = []

    def walk(node: Node, depth: int, prefix: str) -> None:
        indent = "  " * depth
        for kind, item in node["order"]:
            if kind == "group":
                rows.append([f"{indent}{item.removeprefix(prefix)}/", "", "", "", ""])
                walk(node["groups"][item], depth + 1, f"{item}.")
                continue
            name = item.task_id.removeprefix(prefix)
            rows.append([indent + name, item.kind, item.trigger_rule, str(item.retries),
                         ", ".join(item.upstream) or "-"])  # fmt: skip

    walk(tree, 0, "")
    return rows


@dags_group.command("list-import-errors", short_help="Show the files that failed to load.")
@output_option
@pass_state
def list_import_errors_command(state: State, output: str) -> None:
    """Show each Dag file that could not be loaded, and why; exits 1 if there is one."""
    from spawnflow.services import dags

    state.database()
    errors = dags.import_errors()
    if output != "table":
        records = [{"fileloc": e.fileloc, "timestamp": e.timestamp, "error": e.error}
                   for e in errors]  # fmt: skip
        emit(output, records, str, "")
        if errors:
            raise click.exceptions.Exit(1)
        return
    if not errors:
        click.echo("No import errors.")
        return
    for error in errors:
        click.echo(f"{error.fileloc} ({_utc(error.timestamp)} UTC):")
        click.echo("  " + error.error.replace("\n", "\n  "))
        click.echo()
    raise click.exceptions.Exit(1)


@dags_group.command("report", short_help="Parse time and outcome per Dag file.")
@output_option
@pass_state
def report_command(state: State, output: str) -> None:
    """Per-file parse time, Dag count and outcome, slowest first."""
    from spawnflow.services import dags

    state.database()
    found = dags.report()
    records = [
        {"fileloc": row.fileloc, "seconds": row.duration, "dags": row.dag_count,
         "outcome": row.outcome, "last_parsed": row.last_parsed}
        for row in found
    ]  # fmt: skip
    rows = [
        [_where(row.fileloc), f"{row.duration:.3f}", str(row.dag_count), row.outcome,
         _utc(row.last_parsed)]
        for row in found
    ]  # fmt: skip
    emit(output, records,
         lambda: table(["file", "seconds", "dags", "outcome", "last parsed (UTC)"], rows),
         "No Dag files parsed yet: run `spawnflow dag-processor --once`.")  # fmt: skip


def _set_paused(state: State, dag_id: str, paused: bool) -> None:
    from spawnflow.services import dags

    state.database()
    changed = dags.set_paused(dag_id, paused)
    word = "paused" if paused else "unpaused"
    click.echo(f"Dag {dag_id!r} {word}." if changed else f"Dag {dag_id!r} was already {word}.")


@dags_group.command("pause", short_help="Stop a Dag from getting new runs.")
@dag_id_argument()
@pass_state
def pause_command(state: State, dag_id: str) -> None:
    """Pause a Dag: the scheduler creates no new runs for it."""
    _set_paused(state, dag_id, True)


@dags_group.command("unpause", short_help="Let a paused Dag get runs again.")
@dag_id_argument()
@pass_state
def unpause_command(state: State, dag_id: str) -> None:
    """Unpause a Dag."""
    _set_paused(state, dag_id, False)


@dags_group.command("check", short_help="Parse a file and run its tasks under every start method.")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--method", "methods", multiple=True, metavar="METHOD",
              help="Check only this start method (repeatable).")  # fmt: skip
@click.option("--parse-only", is_flag=True, help="Compare the parsed Dags; run no task.")
@click.option("--task-timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="Seconds a task's execute may take.")  # fmt: skip
@output_option
@pass_state
def check_command(
    state: State,
    file: Path,
    methods: tuple[str, ...],
    parse_only: bool,
    task_timeout: float,
    output: str,
) -> None:
    """Parse FILE in a child process under each start method this machine has, then run
    each of its tasks once under each method (as `tasks test` does, upstream XComs from
    the tasks before it, the task's own multiprocessing default set to the method), and
    show where they differ. A Dag or a task that works only under fork (module state,
    unpicklable objects, import side effects) is what breaks on macOS, on Windows or on
    Python 3.14. Exits 1 on a difference or a failure (with --output json or yaml, after
    the report: each method's parse, each task's outcome per method, the differences
    with their likely cause, the verdict)."""
    from spawnflow.bootstrap import startmethods
    from spawnflow.services import dag_check

    settings = state.settings()
    for method in methods:
        startmethods.check(method)
    chosen = list(dict.fromkeys(methods)) or list(startmethods.available())
    timeout = settings.dag_processor.file_parsing_timeout
    folder = str(settings.core.dags_folder)
    people = output == "table"
    with children_print_to_stderr(output):
        results = dag_check.check_file(str(file.resolve()), chosen, timeout, folder)
        if people:  # the parses first: the tasks may take a while
            _print_parses(results)
        ran: list[dag_check.TaskRun] = []
        if not parse_only and all(r.ok for r in results) and any(r.dags for r in results):
            for result in results:
                ran += dag_check.check_tasks(settings, result.method, result.documents,
                                             task_timeout)  # fmt: skip
    report = dag_check.Report(str(file), results, ran, parse_only)
    if people:
        _print_verdict(report)
    else:
        emit_one(output, report.as_record(), str)
    if not report.passed:
        raise click.exceptions.Exit(1)


def _print_parses(results: list[MethodParse]) -> None:
    """A row per method: does the file load, and what it defines; then the errors."""
    rows = [
        [r.method, "ok" if r.ok else "FAIL", str(len(r.dags)), str(r.tasks), f"{r.seconds:.2f}"]
        for r in results
    ]
    click.echo(table(["method", "loads", "dags", "tasks", "seconds"], rows))
    for result in results:
        if result.error:
            click.echo(f"\n{result.method}:\n  " + result.error.replace("\n", "\n  "), err=True)


def _print_verdict(report: Report) -> None:
    """The tasks' states per method, the differences and failures (on stderr), the verdict."""
    if report.runs:
        click.echo()
        click.echo(_task_table(report.runs, report.methods))
    for difference in report.differences:
        click.echo(f"Difference: {difference}.", err=True)
    for (dag_id, task_id), reason in report.failing_everywhere.items():
        click.echo(f"Task {task_id!r} of Dag {dag_id!r} fails under every start method: "
                   f"{reason}.", err=True)  # fmt: skip
    if report.passed:
        click.echo(report.summary())
    elif not any(r.dags for r in report.parses):
        click.echo(report.summary(), err=True)


def _task_table(ran, methods: list[str]) -> str:
    """A row per task, its state under each method."""
    states: dict[tuple[str, str], dict[str, str]] = {}
    for run in ran:
        states.setdefault((run.dag_id, run.task_id), {})[run.method] = run.state
    rows = [[dag_id, task_id, *(by.get(m, "-") for m in methods)]
            for (dag_id, task_id), by in states.items()]  # fmt: skip
    return table(["dag", "task", *methods], rows)


def _conf(text: str | None) -> dict:
    import json

    if text is None:
        return {}
    try:
        conf = json.loads(text)
    except ValueError as error:
        raise click.BadParameter(f"not JSON: {error}", param_hint="--conf") from None
    if not isinstance(conf, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--conf")
    return conf


@dags_group.command("trigger", short_help="Create a manual run of a Dag.")
@dag_id_argument()
@click.option("--conf", help="JSON object passed to the run (tasks see it in their context).")
@pass_state
def trigger_command(state: State, dag_id: str, conf: str | None) -> None:
    """Create a manual run of DAG_ID; the scheduler runs it."""
    from spawnflow.services import runs

    state.database()
    run = runs.trigger(dag_id, _conf(conf))
    click.echo(f"Created run {run.run_id!r} of Dag {dag_id!r} (queued).")


@dags_group.command("test", short_help="Run a Dag once in the foreground.")
@dag_id_argument()
@click.option("--conf", help="JSON object passed to the run.")
@pass_state
def test_command(state: State, dag_id: str, conf: str | None) -> None:
    """Run DAG_ID once, now, through real task processes, with live progress and a summary.
    Parses the Dag files first if the Dag is not known yet. Each change of state is shown
    with the time (UTC) and how long the try ran; a failed task's log ends the output.
    Exits 1 unless the run succeeds."""
    from spawnflow.commands.dag_test import run_and_report

    if not run_and_report(state.ready_to_work(), dag_id, _conf(conf)):
        raise click.exceptions.Exit(1)
