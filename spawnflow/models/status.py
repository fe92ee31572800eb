"""Read the status snapshot (:mod:`spawnflow.comms.status`) with SQLAlchemy Core.

A handful of selects on the lightweight views, so that ``spawnflow status`` can refresh
every second and the scheduler can read it between two loops for ``standalone``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import Connection, func, select

from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.states import JobState, TaskState
from spawnflow.comms.status import (
    ComponentHealth,
    DagGrid,
    ImportErrorLine,
    RunColumn,
    RunningTask,
    StatusSnapshot,
)
from spawnflow.models.views import dag, dag_file, dag_run, import_error, job, task_instance

#: What the view lists as running: every state in which a try is under way or due soon.
IN_FLIGHT = (TaskState.QUEUED, TaskState.RUNNING, TaskState.RESTARTING, TaskState.DEFERRED,
             TaskState.UP_FOR_RETRY)  # fmt: skip


def read_status(
    connection: Connection, settings: Settings, *, runs: int = 10, dag_id: str | None = None
) -> StatusSnapshot:
    """The newest ``runs`` runs of each active Dag (or of ``dag_id``) as a grid, what is in
    flight, the import errors and the components' last signs of life."""
    taken_at = dt.datetime.now(dt.UTC)
    dags = _dags(connection, dag_id)
    return StatusSnapshot(
        taken_at=taken_at,
        dags=_grids(connection, dags, runs),
        running=_in_flight(connection, dag_id),
        import_errors=_import_errors(connection),
        components=_components(connection, settings),
    )


def _utc(moment: dt.datetime | None) -> dt.datetime | None:
    """A stored time, zoned: SQLite hands the views' times back without their zone
    (spawnflow stores every time in UTC)."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=dt.UTC)


def _dags(connection: Connection, dag_id: str | None) -> Sequence:
    query = select(dag.c.dag_id, dag.c.schedule, dag.c.is_paused).order_by(dag.c.dag_id)
    query = query.where(dag.c.is_active.is_(True) if dag_id is None else dag.c.dag_id == dag_id)
    return connection.execute(query).all()


def _grids(connection: Connection, dags: Sequence, runs: int) -> list[DagGrid]:
    if not dags or runs < 1:
        return [DagGrid(row.dag_id, row.schedule or "", row.is_paused, [], []) for row in dags]
    newest_first = func.row_number().over(
        partition_by=dag_run.c.dag_id, order_by=dag_run.c.id.desc()
    )
    ranked = (
        select(
            dag_run.c.id,
            dag_run.c.dag_id,
            dag_run.c.run_id,
            dag_run.c.state,
            dag_run.c.logical_date,
            newest_first.label("rank"),
        )
        .where(dag_run.c.dag_id.in_([row.dag_id for row in dags]))
        .subquery()
    )
    run_rows = connection.execute(
        select(ranked).where(ranked.c.rank <= runs).order_by(ranked.c.id)
    ).all()
    states: dict[int, dict[str, str]] = {row.id: {} for row in run_rows}
    order: dict[str, dict[str, None]] = {row.dag_id: {} for row in dags}
    if states:
        instances = connection.execute(
            select(task_instance.c.dag_run_id, task_instance.c.task_id, task_instance.c.state)
            .where(task_instance.c.dag_run_id.in_(list(states)))
            .order_by(task_instance.c.id)
        ).all()
        dag_of = {row.id: row.dag_id for row in run_rows}
        for instance in instances:
            states[instance.dag_run_id][instance.task_id] = instance.state
            order[dag_of[instance.dag_run_id]].setdefault(instance.task_id)
    columns: dict[str, list[RunColumn]] = {row.dag_id: [] for row in dags}
    for row in run_rows:
        columns[row.dag_id].append(
            RunColumn(row.run_id, row.state, _utc(row.logical_date), states[row.id])
        )
    return [
        DagGrid(
            row.dag_id,
            row.schedule or "",
            row.is_paused,
            list(order[row.dag_id]),
            columns[row.dag_id],
        )
        for row in dags
    ]


def _in_flight(connection: Connection, dag_id: str | None) -> list[RunningTask]:
    query = (
        select(
            dag_run.c.dag_id,
            dag_run.c.run_id,
            task_instance.c.task_id,
            task_instance.c.state,
            task_instance.c.try_number,
            task_instance.c.start_date,
        )
        .join_from(task_instance, dag_run, task_instance.c.dag_run_id == dag_run.c.id)
        .where(task_instance.c.state.in_(IN_FLIGHT))
        .order_by(task_instance.c.start_date, task_instance.c.id)
    )
    if dag_id is not None:
        query = query.where(dag_run.c.dag_id == dag_id)
    return [
        RunningTask(
            row.dag_id, row.run_id, row.task_id, row.state, row.try_number, _utc(row.start_date)
        )
        for row in connection.execute(query)
    ]


def _import_errors(connection: Connection) -> list[ImportErrorLine]:
    rows = connection.execute(
        select(import_error.c.fileloc, import_error.c.error).order_by(import_error.c.fileloc)
    )
    return [ImportErrorLine(row.fileloc, _last_line(row.error)) for row in rows]


def _last_line(error: str) -> str:
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _components(connection: Connection, settings: Settings) -> list[ComponentHealth]:
    timeouts = {
        "scheduler": settings.scheduler.job_heartbeat_timeout,
        "triggerer": settings.triggerer.heartbeat_timeout,
    }
    jobs = connection.execute(
        select(job.c.job_type, job.c.hostname, job.c.pid, job.c.latest_heartbeat)
        .where(job.c.state == JobState.RUNNING)
        .order_by(job.c.job_type, job.c.id)
    ).all()
    found = [
        ComponentHealth(
            row.job_type,
            row.hostname,
            row.pid,
            _utc(row.latest_heartbeat),
            timeouts.get(row.job_type, settings.scheduler.job_heartbeat_timeout),
        )
        for row in jobs
    ]
    # The Dag processor keeps no job row: its sign of life is the newest parse, which
    # it repeats every refresh_interval even when no file changed.
    last_parsed = connection.execute(select(func.max(dag_file.c.last_parsed))).scalar()
    if last_parsed is not None:
        refresh = settings.dag_processor.refresh_interval
        timeout = 2 * refresh + settings.dag_processor.file_parsing_timeout
        found.insert(0, ComponentHealth("dag-processor", "", None, _utc(last_parsed), timeout))
    return found
