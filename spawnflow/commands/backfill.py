"""``spawnflow dags backfill``: run a Dag over past logical dates (Airflow 3's backfill)."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, Any

import click

from spawnflow.commands.completion import dag_id_argument
from spawnflow.commands.output import table
from spawnflow.commands.state import State, pass_state

if TYPE_CHECKING:
    from spawnflow.services.backfills import Plan, Progress

REPROCESS_CHOICES = ("none", "failed", "completed")


def _date_text(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refuse a malformed date before any database is asked (the zone comes later)."""
    import datetime as dt

    try:
        dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a date: give YYYY-MM-DD or an ISO 8601 time such as "
            "2026-01-31T06:00:00+00:00"
        ) from None
    return value


@click.command("backfill", short_help="Run a Dag for the logical dates of a past range.")
@dag_id_argument()
@click.option("-s", "--start-date", "start", required=True, callback=_date_text, metavar="DATE",
              help="The first logical date (included); without a zone, in the Dag's.")  # fmt: skip
@click.option("-e", "--end-date", "end", required=True, callback=_date_text, metavar="DATE",
              help="The last logical date (included); without a zone, in the Dag's.")  # fmt: skip
@click.option("--reprocess-behavior", type=click.Choice(REPROCESS_CHOICES), default="none",
              show_default=True,
              help="Dates that have a run already: none runs none of them again, failed "
                   "those whose run failed, completed all of them. A date whose run is "
                   "queued or running is never run twice.")  # fmt: skip
@click.option("--max-active-runs", type=int, metavar="N",
              help="At most N of the backfill's runs at once (default: the Dag's "
                   "max_active_runs); the Dag's own runs are not counted.")  # fmt: skip
@click.option("--conf", help="JSON object passed to each new run.")
@click.option("--dry-run", is_flag=True,
              help="List the runs it would create, run again or skip, and why; "
                   "write nothing.")  # fmt: skip
@click.option("--no-wait", is_flag=True,
              help="Only record the backfill and its runs, for the running scheduler.")  # fmt: skip
@pass_state
def backfill_command(state: State, dag_id: str, start: str, end: str, reprocess_behavior: str,
                     max_active_runs: int | None, conf: str | None, dry_run: bool,
                     no_wait: bool) -> None:  # fmt: skip
    """Run DAG_ID for each logical date its schedule has from START_DATE to END_DATE,
    in order, at most --max-active-runs at a time, with a scheduler in this process
    (progress shown) until every run has finished; exits 1 if one failed. A paused Dag
    is backfilled too.

    Ctrl-C stops at once and keeps the backfill: running the same command again resumes
    it (no date gets a second run). A backfill of the same Dag over another range is
    refused until this one has finished."""
    from spawnflow.bootstrap import lifecycle
    from spawnflow.commands.dags import _conf
    from spawnflow.comms.states import ReprocessBehavior
    from spawnflow.services import backfills

    if max_active_runs is not None and max_active_runs < 1:
        raise click.BadParameter(f"must be 1 or more, not {max_active_runs}",
                                 param_hint="--max-active-runs")  # fmt: skip
    request = backfills.Request(dag_id, start, end, ReprocessBehavior(reprocess_behavior),
                                max_active_runs, _conf(conf))  # fmt: skip
    if dry_run:
        state.database()
        _show_dry_run(backfills.prepare(request, dry_run=True))
        return
    if not no_wait:
        _scheduler_logging(state)
        # The first Ctrl-C stops at once (no deferred warm stop): the backfill is
        # resumable from any point, and waiting for its tasks would gain nothing.
        lifecycle.install()
        settings = state.ready_to_work()
    else:
        settings = state.database()
    resume = _resume_command(dag_id, start, end)
    try:
        plan = backfills.prepare(request, dry_run=False)
    except lifecycle.WarmStop:
        click.echo("Stopped before the backfill was recorded.", err=True)
        raise click.exceptions.Exit(lifecycle.signal_exit_code() or 130) from None
    _show_plan(plan, request)
    assert plan.backfill_id is not None  # written
    if no_wait:
        click.echo("The scheduler runs them (`spawnflow scheduler` or `spawnflow standalone`).")
        return
    view = _progress_view()
    try:
        done = backfills.run_backfill(settings, plan.backfill_id, view)
    except lifecycle.WarmStop:
        view.close()
        click.echo(f"Backfill {plan.backfill_id} stopped; its runs are kept. Resume it with: "
                   f"{resume}", err=True)  # fmt: skip
        raise click.exceptions.Exit(lifecycle.signal_exit_code() or 130) from None
    finally:
        view.close()
    click.echo(f"Backfill {plan.backfill_id} completed: {done.succeeded} run(s) succeeded, "
               f"{done.failed} failed.")  # fmt: skip
    if done.failed:
        raise click.exceptions.Exit(1)


def _scheduler_logging(state: State) -> None:
    """The scheduler's log file, as ``spawnflow scheduler`` writes it; on the console
    only warnings (the progress says the rest), or everything with --verbose."""
    from spawnflow.bootstrap import logs

    settings = state.settings()
    logs.configure(
        "scheduler", level=settings.logging.level, console=True,
        console_level=settings.logging.level if state.verbose else "WARNING",
        log_file=logs.role_log_file(settings.logging.base_log_folder, "scheduler"),
    )  # fmt: skip


def _resume_command(dag_id: str, start: str, end: str) -> str:
    words = ["spawnflow", "dags", "backfill", dag_id, "-s", start, "-e", end]
    return " ".join(shlex.quote(word) for word in words)


def _when(moment) -> str:
    from spawnflow.commands.runs import when

    return when(moment)


def _range(plan: Plan) -> str:
    return f"from {_when(plan.from_date)} to {_when(plan.to_date)} UTC"


def _show_dry_run(plan: Plan) -> None:
    from spawnflow.services import backfills

    if plan.resumed:
        click.echo(f"Would resume backfill {plan.backfill_id} of Dag {plan.dag_id!r} "
                   f"({_range(plan)}): {plan.count(backfills.RESUME)} of "
                   f"{len(plan.dates)} run(s) to go.")  # fmt: skip
    else:
        click.echo(f"Dry run: a backfill of Dag {plan.dag_id!r} {_range(plan)} would create "
                   f"{plan.count(backfills.CREATE)} run(s), run {plan.count(backfills.RERUN)} "
                   f"again and skip {plan.count(backfills.SKIP)} date(s), at most "
                   f"{plan.max_active_runs} at once. Nothing was written.")  # fmt: skip
    words = {backfills.CREATE: "create", backfills.RERUN: "run again",
             backfills.SKIP: "skip", backfills.RESUME: "resume"}  # fmt: skip
    rows = [[_when(d.logical_date), words[d.action], d.run_id or "-", d.reason]
            for d in plan.dates]  # fmt: skip
    click.echo(table(["logical date (UTC)", "action", "run", "why"], rows))
    if plan.paused:
        click.echo(f"Dag {plan.dag_id!r} is paused: a backfill runs it anyway.")


def _show_plan(plan: Plan, request) -> None:
    from spawnflow.services import backfills

    if plan.resumed:
        click.echo(f"Resuming backfill {plan.backfill_id} of Dag {plan.dag_id!r} "
                   f"({_range(plan)}): {plan.count(backfills.RESUME)} of {len(plan.dates)} "
                   f"run(s) to go, at most {plan.max_active_runs} at once.")  # fmt: skip
        if (request.reprocess != plan.reprocess
                or request.max_active_runs not in (None, plan.max_active_runs)):  # fmt: skip
            click.echo("(It keeps the --reprocess-behavior and --max-active-runs it was "
                       "created with.)")  # fmt: skip
    else:
        click.echo(f"Backfill {plan.backfill_id} of Dag {plan.dag_id!r} {_range(plan)}: "
                   f"{plan.count(backfills.CREATE)} new run(s), {plan.count(backfills.RERUN)} "
                   f"to run again, {plan.count(backfills.SKIP)} date(s) skipped; at most "
                   f"{plan.max_active_runs} at once.")  # fmt: skip
        for date in plan.dates:
            if date.action == backfills.SKIP:
                click.echo(f"  skipped {_when(date.logical_date)}: {date.reason}")
    if plan.paused:
        click.echo(f"Dag {plan.dag_id!r} is paused: the backfill runs it anyway.")


def _progress_view() -> _LineProgress:
    """What shows a backfill's progress: a bar on a terminal, a line per change when
    piped (the last line of a log says where it stood)."""
    return _RichProgress() if sys.stdout.isatty() else _LineProgress()


class _LineProgress:
    """A line each time the counts change."""

    def __init__(self) -> None:
        self._last = ""

    def __call__(self, progress: Progress) -> None:
        line = progress.describe()
        if line != self._last:
            self._last = line
            click.echo(line)

    def close(self) -> None:
        """Nothing to put back."""


class _RichProgress(_LineProgress):
    """rich's progress bar, redrawn in place, from the first report until closed."""

    def __init__(self) -> None:
        super().__init__()
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, progress: Progress) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
        from rich.progress import Progress as Bar

        if self._bar is None:
            self._bar = Bar(TextColumn("runs"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.description}"))  # fmt: skip
            self._task = self._bar.add_task("", total=progress.total)
            self._bar.start()
        described = (f"{progress.running} running, {progress.queued} queued, "
                     f"{progress.failed} failed")  # fmt: skip
        self._bar.update(self._task, completed=progress.done, total=progress.total,
                         description=described)  # fmt: skip

    def close(self) -> None:
        """Stop redrawing, leaving the last frame (idempotent)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
