"""Runs, task instances, logs and Variables for the CLI, without click."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.states import DagRunState, TaskState
from spawnflow.models.dag import DagModel
from spawnflow.models.run import DagRun, TaskInstance, Variable, XCom
from spawnflow.models.triggers import end_deferral
from spawnflow.processors.scheduler import runs
from spawnflow.processors.scheduler.queueing import attempt_log
from spawnflow.services.records import (
    NotFound,
    find_task_instance,
    no_run,
    resolve_run_id,
    unknown_dag,
    unknown_task,
)


def trigger(dag_id: str, conf: dict[str, Any] | None = None) -> DagRun:
    """Create a manual run of ``dag_id``; the scheduler picks it up."""
    with orm.session_scope() as session:
        if session.get(DagModel, dag_id) is None:
            raise unknown_dag(session, dag_id)
        return runs.trigger_run(session, dag_id, conf)


def _locked_run(session, dag_id: str, run_id: str) -> DagRun:
    """The run, locked: the scheduler decides about its task instances under this lock."""
    run_id = resolve_run_id(session, dag_id, run_id)  # latest, a prefix, a log folder
    run = session.scalar(
        select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id).with_for_update()
    )
    if run is None:
        raise no_run(dag_id, run_id)
    return run


class Cleared(list):
    """The task ids cleared; ``purge_failures`` names stored values that could not be
    deleted (their rows are gone either way)."""

    purge_failures: list[str]


def clear(dag_id: str, run_id: str, task_ids: list[str], map_index: int | None = None) -> Cleared:
    """Make task instances run again: XComs removed, tries start over.

    A running one becomes ``restarting``: its supervisor sees the change within one
    heartbeat, stops the task process and only then sets ``none``, so that the next
    try never runs beside the old one. The others become ``none`` at once. A mapped
    task is cleared whole and expands again (see :func:`clear_task`), or only its
    instance ``map_index``. Values an XCom backend kept elsewhere are deleted once the
    rows are (through a helper).
    """
    from spawnflow.bootstrap import settings as settings_module
    from spawnflow.services import xcoms

    cleared = Cleared()
    stored = []
    bag = runs.DagBag()
    with orm.session_scope() as session:
        run = _locked_run(session, dag_id, run_id)
        document = bag.get(session, dag_id)
        for task_id in task_ids:
            if map_index is None:
                rows = _task_rows(session, run, task_id)
            else:
                rows = [find_task_instance(session, dag_id, run_id, task_id, map_index=map_index)]
            if document is not None and task_id not in document.task_ids:
                raise UserError(
                    f"task {task_id!r} is no longer in Dag {dag_id!r}; it cannot run again"
                )
            retries = document.task(task_id).retries if document else 0
            stored += clear_task(session, run, rows, retries, whole=map_index is None)
            cleared.append(task_id if map_index is None else f"{task_id}[{map_index}]")
        if run.state in DagRunState.FINISHED:
            run.state, run.end_date = DagRunState.QUEUED, None
    cleared.purge_failures = xcoms.purge(settings_module.current(), stored)
    return cleared


def _task_rows(session, run: DagRun, task_id: str) -> list[TaskInstance]:
    """Every task instance of ``task_id`` in ``run`` (a mapped task's instances), locked."""
    rows = list(session.scalars(
        select(TaskInstance)
        .where(TaskInstance.dag_run_id == run.id, TaskInstance.task_id == task_id)
        .order_by(TaskInstance.map_index)
        .with_for_update()
    ))  # fmt: skip
    if not rows:
        raise unknown_task(session, run.dag_id, run.run_id, task_id)
    return rows


def clear_task(session, run: DagRun, rows: list[TaskInstance], retries: int,
               whole: bool = True) -> list:  # fmt: skip
    """Clear the task instances ``rows`` of one task in ``run`` (see :func:`clear`).

    When ``whole`` and they are a mapped task's instances, the task expands again, as
    Airflow's does, because its upstream tasks may now return a list of another length:
    instance 0 goes back to being the task's one unexpanded row (map index -1), the
    others become ``removed``. The scheduler's expansion takes the removed rows back for
    the indexes the new list has, so their try numbers, and their logs, go on. A running
    instance is ``restarting`` as any other (its next try never runs beside the one
    being stopped); the expansion removes it if the new list is shorter.
    Returns the values an XCom backend kept elsewhere, for
    :func:`spawnflow.services.xcoms.purge` once the session committed.
    """
    stored: list = []
    for ti in rows:
        stored += clear_task_instance(session, run, ti, retries)
    if whole and any(ti.map_index >= 0 for ti in rows):
        for ti in rows:
            if ti.map_index == 0:
                ti.map_index = -1
            elif ti.state == TaskState.NONE:  # a restarting one is released first
                ti.state, ti.end_date = TaskState.REMOVED, runs.utcnow()
                ti.reason = "its mapped task was cleared and expands again"
        session.flush()  # -1 taken before anything else reads the task's rows
    return stored


def clear_task_instance(session, run: DagRun, ti: TaskInstance, retries: int) -> list:
    """Clear one task instance of ``run`` in ``session`` (see :func:`clear`): its XCom rows
    deleted, its retries available again. The values an XCom backend kept elsewhere, for
    :func:`spawnflow.services.xcoms.purge` once the session committed."""
    from spawnflow.services import xcoms

    stored = xcoms.stored_values(session, run, ti)
    session.execute(delete(XCom).where(XCom.task_instance_id == ti.id))
    ti.max_tries = ti.try_number + retries  # every retry is available again
    if ti.state in (TaskState.RUNNING, TaskState.RESTARTING):
        ti.state, ti.last_heartbeat = TaskState.RESTARTING, runs.utcnow()
    else:
        ti.state = TaskState.NONE
        end_deferral(ti)  # a deferred one stops waiting: the triggerer drops its trigger
    ti.reason, ti.next_try_at, ti.end_date = None, None, None
    return stored


def mark_failed(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """Fail a task instance (instance ``map_index`` of a mapped task) now; if it runs,
    its supervisor stops it within one heartbeat."""
    with orm.session_scope() as session:
        _locked_run(session, dag_id, run_id)
        ti = find_task_instance(session, dag_id, run_id, task_id, map_index=map_index)
        previous = ti.state
        ti.state, ti.reason, ti.end_date = (
            TaskState.FAILED,
            "marked failed from the CLI",
            runs.utcnow(),
        )
        end_deferral(ti)
        return previous


def log_path(settings: Settings, dag_id: str, run_id: str, task_id: str, attempt: int | None,
             map_index: int = -1):  # fmt: skip
    """The log file of one try (the latest when ``attempt`` is None) of the task (of its
    element ``map_index``, for a mapped task), for ``run_id`` as the user may spell it
    (``latest``, a prefix, the log folder's name)."""
    with orm.session_scope(write=False) as session:
        run_id = resolve_run_id(session, dag_id, run_id)  # the folder is the real id's
        ti = find_task_instance(session, dag_id, run_id, task_id, lock=False, map_index=map_index)
        number = attempt or ti.try_number
        state, tries = ti.state, ti.try_number
    if number < 1:
        raise NotFound(f"task {task_id!r} of run {run_id!r} has not run yet (it is {state})")
    if number > tries:
        raise NotFound(
            f"task {task_id!r} of run {run_id!r} has run {tries} time(s): "
            f"there is no attempt {number}"
        )
    return attempt_log(settings, dag_id, run_id, task_id, number, map_index), state


_LINE_KEYS = frozenset({"timestamp", "event", "level", "logger", "role", "pid"})


def render_log_line(line: str) -> str:
    """One JSON line of a try's log as a person reads it."""
    try:
        record = json.loads(line)
    except ValueError:
        return line.rstrip("\n")
    if not isinstance(record, dict):
        return line.rstrip("\n")
    stamp = str(record.get("timestamp", ""))[:19].replace("T", " ")
    if "stream" in record:
        return f"{stamp} [{record['stream']}] {record.get('event', '')}"
    # A field that is None (in a line written before they were left out) says nothing.
    extra = {k: v for k, v in record.items() if k not in _LINE_KEYS and v is not None}
    fields = " ".join(f"{k}={v}" for k, v in extra.items())
    return f"{stamp} {record.get('level', 'info'):<7} {record.get('event', '')} {fields}".rstrip()


def read_log(path: Path, offset: int = 0) -> tuple[list[str], int]:
    """Rendered lines of ``path`` from byte ``offset``, and the offset after them."""
    if not path.exists():
        return [], offset
    with path.open("rb") as file:
        file.seek(offset)
        data = file.read()
    complete = data[: data.rfind(b"\n") + 1] if b"\n" in data else b""
    lines = [render_log_line(line) for line in complete.decode(errors="replace").splitlines()]
    return lines, offset + len(complete)


def read_remote_log(settings: Settings, path: Path) -> tuple[str, list[str]] | None:
    """The remote copy (``[logging] remote_base_url``) of the try's log whose local file
    is ``path``: its URL and rendered lines; None when remote logs are off or it has no
    copy there. A copy that cannot be read is a :class:`UserError` that says why."""
    from spawnflow.bootstrap import remote_logs

    if not remote_logs.enabled(settings):
        return None
    key = remote_logs.key_of(path)
    url = remote_logs.url_of(settings, key)
    try:
        data = remote_logs.download(settings, key)
    except Exception as error:  # noqa: BLE001 - any filesystem's own errors
        raise UserError(f"the try's log could not be read from {url} ([logging] "
                        f"remote_base_url): {type(error).__name__}: {error}") from None  # fmt: skip
    if data is None:
        return None
    text = data.decode(errors="replace")
    return url, [render_log_line(line) for line in text.splitlines()]


# -- Variables ---------------------------------------------------------------------------


def set_variable(key: str, value: str, description: str | None = None) -> None:
    with orm.session_scope() as session:
        row = session.get(Variable, key) or Variable(key=key)
        row.value = value
        if description is not None:
            row.description = description
        session.add(row)


def get_variable(key: str) -> str:
    with orm.session_scope(write=False) as session:
        row = session.get(Variable, key)
        if row is None:
            raise NotFound(f"there is no Variable {key!r}; see `spawnflow variables list`")
        return row.value


def list_variables() -> list[Variable]:
    with orm.session_scope(write=False) as session:
        return list(session.scalars(select(Variable).order_by(Variable.key)))


def delete_variable(key: str) -> None:
    with orm.session_scope() as session:
        row = session.get(Variable, key)
        if row is None:
            raise NotFound(f"there is no Variable {key!r}")
        session.delete(row)
