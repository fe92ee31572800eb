"""What ``spawnflow dags test`` prints: each change of state as it happens, with the time
and how long a try ran; then a summary; and for a task that failed, the end of its try's
log (what it printed, the error) and the command that shows all of it."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import click

from spawnflow.bootstrap.settings import Settings
from spawnflow.commands.output import table

#: Lines of a failed try's log shown under the summary; ``tasks logs`` shows them all.
TAIL_LINES = 20
#: The scheduler's own lines about the tested run's ends, which this view already says.
_SAID_HERE = frozenset({"task finished", "run finished"})


class _SaidHere(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "spawnflow.scheduler" and record.msg in _SAID_HERE)


def run_and_report(settings: Settings, dag_id: str, conf: dict[str, Any] | None) -> bool:
    """Run ``dag_id`` once through :func:`spawnflow.services.testing.test_dag`, telling
    the user as it goes; True if the run succeeded."""
    from spawnflow.commands.output import map_index_cell
    from spawnflow.commands.runs import when
    from spawnflow.comms.states import DagRunState, TaskState
    from spawnflow.services import testing

    for handler in logging.getLogger().handlers:
        handler.addFilter(_SaidHere())
    started = dt.datetime.now(dt.UTC)

    def on_start(run_id: str) -> None:
        click.echo(f"{_clock()}  run {run_id!r} of Dag {dag_id!r} created")

    def on_change(change: testing.TaskChange) -> None:
        if change.state in (TaskState.NONE, TaskState.SCHEDULED):
            return  # not started yet: no news
        took = f" after {change.seconds:.2f} s" if change.seconds is not None else ""
        why = f" ({change.reason})" if change.reason else ""
        retry = f", try {change.try_number}" if change.try_number > 1 else ""
        element = f"[{change.map_index}]" if change.map_index >= 0 else ""
        click.echo(f"{_clock()}  {change.task_id}{element}: {change.state}{took}{retry}{why}")

    run, tis = testing.test_dag(settings, dag_id, conf, on_change, on_start)
    mapped = any(ti.map_index >= 0 for ti in tis)  # then a map index column
    rows = [[ti.task_id, *([map_index_cell(ti.map_index)] if mapped else []), ti.state,
             str(ti.try_number), f"{ti.duration or 0:.2f}", ti.reason or ""]
            for ti in tis]  # fmt: skip
    click.echo()
    headers = ["task", *(["map index"] if mapped else []), "state", "tries", "seconds", "reason"]
    click.echo(table(headers, rows))
    seconds = (dt.datetime.now(dt.UTC) - started).total_seconds()
    click.echo(f"Run {run.run_id!r}: {run.state} ({when(run.start_date)} to "
               f"{when(run.end_date)} UTC; {seconds:.1f} s in all)")  # fmt: skip
    failed = [ti for ti in tis if ti.state in (TaskState.FAILED, TaskState.UP_FOR_RETRY)]
    for ti in failed:
        _show_failure(settings, dag_id, run.run_id, ti.task_id, ti.try_number, ti.map_index)
    return run.state == DagRunState.SUCCESS


def _show_failure(settings: Settings, dag_id: str, run_id: str, task_id: str, tries: int,
                  map_index: int = -1) -> None:  # fmt: skip
    from spawnflow.processors.scheduler.queueing import attempt_log
    from spawnflow.services import runs

    path = attempt_log(settings, dag_id, run_id, task_id, tries, map_index)
    lines = runs.read_log(path)[0]
    click.echo()
    if lines:
        shown = lines[-TAIL_LINES:]
        more = f" (the last {len(shown)} of {len(lines)})" if len(shown) < len(lines) else ""
        click.echo(f"Task {_named(task_id, map_index)} failed; its log{more}:")
        for line in shown:
            click.echo(f"  {line}")
    else:
        click.echo(f"Task {_named(task_id, map_index)} failed before it wrote a log line.")
    element = f" --map-index {map_index}" if map_index >= 0 else ""
    click.echo(f"All of it: spawnflow tasks logs {dag_id} {_quoted(run_id)} {task_id}{element}")


def _named(task_id: str, map_index: int) -> str:
    return f"{task_id!r}" + (f" (map index {map_index})" if map_index >= 0 else "")


def _clock() -> str:
    return f"{dt.datetime.now(dt.UTC):%H:%M:%S}"


def _quoted(word: str) -> str:
    """``word`` as a shell reads it back (run ids hold ``+`` and ``:``, which it keeps)."""
    import shlex

    return shlex.quote(word)
