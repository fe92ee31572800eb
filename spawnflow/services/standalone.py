"""``spawnflow standalone``: the Dag processor, the scheduler and the triggerer, as
children, on one screen.

Each is launched by the launcher and reports a ComponentStatus after each pass or
loop; this process shows one status line per component and stops the whole tree
on Ctrl-C or SIGTERM (warm; a second Ctrl-C: cold).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spawnflow.bootstrap import forkservers, launcher, lifecycle, logs, startmethods
from spawnflow.bootstrap.child import ExitStatus, stop_many
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.watch import Watch, Watched
from spawnflow.comms import ComponentStatus

log = logs.get_logger("spawnflow.standalone")

COMPONENTS = {
    "dag-processor": "spawnflow.processors.dag_processor.manager:run",
    "scheduler": "spawnflow.processors.scheduler.job:run",
    "triggerer": "spawnflow.processors.triggerer.job:run",
}


@dataclass
class Outcome:
    """How standalone ended."""

    reason: str
    exit_code: int
    statuses: dict[str, ComponentStatus] = field(default_factory=dict)


def run(
    settings: Settings,
    *,
    exit_when_idle: bool,
    show: Callable[[str], None],
    on_status: Callable[[dict[str, ComponentStatus]], None] | None = None,
) -> Outcome:
    """Launch the components and watch them until idle (if asked), stopped, or one dies.

    ``show`` gets a status line whenever it changes, and what standalone says; with
    ``on_status`` (a live view), that gets every component's newest status instead of
    the line, the scheduler's with what ``spawnflow status`` shows."""
    statuses: dict[str, ComponentStatus] = {}
    ended: list[Outcome] = []
    watch = Watch()

    def on_message(watched: Watched, message: object) -> None:
        if isinstance(message, ComponentStatus):
            statuses[watched.child.role] = message

    def on_exit(watched: Watched, status: ExitStatus) -> None:
        role = watched.child.role
        show(f"the {role} {status.describe(meaning=False)}; stopping")
        ended.append(Outcome(f"the {role} {status.describe()}", 1, statuses))

    # Every process of the tree forks from the servers made here (under forkserver).
    forkservers.share(settings, startmethods.ROLE_COMPONENTS)  # once: the command did it
    children = {}
    for role, target in COMPONENTS.items():
        live = {"status_snapshots": True} if on_status and role == "scheduler" else {}
        spec = launcher.ChildSpec(role, target, kwargs=live, settings=settings,
                                  warm_stop_group=False)  # fmt: skip
        children[role] = launcher.launch(spec, share_forkservers=True)
        watch.add(children[role], on_message=on_message, on_exit=on_exit)
    idle_after: int | None = None
    last_line = ""
    try:
        while True:
            if lifecycle.stop_requested.is_set():
                return Outcome("stopped", _stopped_code(), statuses)
            watch.wait(timeout=1.0)
            if ended:
                return ended[0]
            line = " | ".join(
                f"{role}: {statuses[role].text if role in statuses else 'starting'}"
                for role in children
            )
            if line != last_line or on_status is not None:
                if on_status is not None:
                    on_status(statuses)
                else:
                    show(line)
                last_line = line
            if exit_when_idle:
                processor, scheduler = statuses.get("dag-processor"), statuses.get("scheduler")
                if processor is not None and scheduler is not None and idle_after is None:
                    # Dags from the first pass count only once the scheduler saw them.
                    idle_after = scheduler.loops + 1
                if idle_after is not None and all_idle(statuses, idle_after):
                    return idle_outcome(statuses)
    except lifecycle.WarmStop:  # a second request before the loop saw the first
        return Outcome("stopped at once", _stopped_code(), statuses)
    finally:
        with lifecycle.unwinding():  # a second Ctrl-C while stopping: cold
            started = time.monotonic()
            stop_many(list(children.values()), whole_tree=True)
            show(f"stopped in {time.monotonic() - started:.1f} s")
        ended_cold = [c for c in children.values() if c.exit_status and c.exit_status.cold]
        if any(child.role == "scheduler" for child in ended_cold):
            _release_what_it_ran(settings, children["scheduler"].pid)


def all_idle(statuses: dict[str, ComponentStatus], idle_after: int) -> bool:
    """Whether ``--exit-when-idle`` ends here: the scheduler is idle after its loop
    ``idle_after``, and every component has reported. One that is still starting (a
    triggerer on a busy machine can come up after the runs ended) is not stopped in the
    middle of its start, and the last status shows each component as it ran."""
    if not all(role in statuses for role in COMPONENTS):
        return False
    scheduler = statuses["scheduler"]
    return scheduler.idle and scheduler.loops > idle_after


def idle_outcome(statuses: dict[str, ComponentStatus]) -> Outcome:
    """How an idle ``--exit-when-idle`` ends: 0 only if no run failed and no file has an
    import error, so that it can gate a CI job."""
    scheduler, processor = statuses["scheduler"], statuses["dag-processor"]
    failed, errors = scheduler.failed_runs, processor.import_errors
    reason = (
        f"every due Dag run has finished: {scheduler.succeeded_runs} succeeded, {failed} failed"
    )
    if errors:
        files = "file has" if errors == 1 else "files have"
        reason += f"; {errors} Dag {files} an import error (spawnflow dags list-import-errors)"
    return Outcome(reason, 1 if failed or errors else 0, statuses)


def _stopped_code() -> int:
    """What standalone exits with when asked to stop: as shells expect after a signal
    (130 for Ctrl-C, 143 for SIGTERM)."""
    return lifecycle.signal_exit_code() or 130


def _release_what_it_ran(settings: Settings, pid: int) -> None:
    """The scheduler was killed with its workers and their tasks: record on each task
    instance it had queued or running why it ended, and queue it again at once."""
    from sqlalchemy import exc

    from spawnflow.bootstrap import orm, outage
    from spawnflow.processors.scheduler import cut_short

    why = "standalone was stopped cold before the task finished; queued again"

    def write() -> None:
        with orm.session_scope() as session:
            job_id = cut_short.job_of(session, socket.gethostname(), pid)
            if job_id is not None:
                cut_short.release(session, job_id, why)

    try:
        outage.ride_out(write, what="recording what a cold stop cut short",
                        tolerance=min(10.0, settings.database.outage_tolerance))  # fmt: skip
    except (exc.SQLAlchemyError, orm.DatabaseUnavailable) as error:
        log.warning("could not record what a cold stop cut short", error=str(error))
