"""``spawnflow celery worker | status``: the Celery executor's workers."""

from __future__ import annotations

import click

from spawnflow.commands.groups import Group
from spawnflow.commands.output import table
from spawnflow.commands.state import State, pass_state


@click.group("celery", cls=Group, short_help="Run and inspect Celery workers.")
def celery_group() -> None:
    """The workers of the Celery executor ([core] executor = celery)."""


@celery_group.command("worker", short_help="Run tasks that the scheduler sends through Celery.")
@click.option("--queues", "-q", metavar="Q,...",
              help="Queues to take tasks from (default: [celery] default_queue).")  # fmt: skip
@click.option("--concurrency", "-c", type=click.IntRange(min=1),
              help="Tasks run at once (default: [celery] worker_concurrency).")  # fmt: skip
@click.option("--hostname", "-n", help="The worker's name (default: celery@<host>).")
@pass_state
def worker_command(state: State, queues: str | None, concurrency: int | None,
                   hostname: str | None) -> None:  # fmt: skip
    """Run a Celery worker that takes task instances from the broker ([celery] broker_url)
    and runs each through spawnflow's own supervisor, in a task process started under
    [executor] mp_start_method (Celery never forks the task: its pool is threads).

    SIGTERM or Ctrl-C lets the running tasks finish (a warm stop); a second Ctrl-C stops
    at once."""
    from spawnflow.commands.scheduler import console_logging
    from spawnflow.processors import celery_worker

    console_logging(state, "celery-worker")
    settings = state.ready_to_work()
    chosen = [q.strip() for q in (queues or settings.celery.default_queue).split(",")
              if q.strip()]  # fmt: skip
    status = celery_worker.run(settings, queues=chosen,
                               concurrency=concurrency or settings.celery.worker_concurrency,
                               hostname=hostname, loglevel=settings.logging.level)  # fmt: skip
    if status:
        raise click.exceptions.Exit(status)


@celery_group.command("status", short_help="The Celery workers, their queues and tasks.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="Seconds to wait for the workers to answer.")  # fmt: skip
@pass_state
def status_command(state: State, timeout: float) -> None:
    """Ask every Celery worker on the broker which queues it takes tasks from and which
    tries it runs now. Exits 1 if none answers."""
    from spawnflow.executors import celery_app

    settings = state.settings()
    app = celery_app.make_app(settings)
    try:
        inspect = app.control.inspect(timeout=timeout)
        queues, active = inspect.active_queues() or {}, inspect.active() or {}
    finally:
        app.close()
    workers = sorted(set(queues) | set(active))
    if not workers:
        click.echo(f"No spawnflow celery worker answered within {timeout:g} s.", err=True)
        raise click.exceptions.Exit(1)
    rows = []
    for worker in workers:
        names = ",".join(sorted(q["name"] for q in queues.get(worker, [])))
        running = [_described(task) for task in active.get(worker, [])]
        rows.append([worker, names or "-", str(len(running)), "; ".join(running) or "-"])
    click.echo(table(["worker", "queues", "running", "tries"], rows))


def _described(task: dict) -> str:
    """A running Celery task as the try it is: ``dag.task (run, try N)``."""
    from spawnflow.executors import celery_app

    try:
        workload = celery_app.decode(task["args"][0])
    except (KeyError, IndexError, ValueError, TypeError):
        return str(task.get("name", "?"))
    return f"{workload.dag_id}.{workload.task_id} ({workload.run_id}, try {workload.try_number})"
