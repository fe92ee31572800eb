"""XComs for commands: read them resolved through the configured backend, purge them.

Values a backend keeps elsewhere are read (and deleted) by an XCom helper process
started for the command, as a task's supervisor would: this process never loads the
backend's modules.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from sqlalchemy import select

from spawnflow.bootstrap import orm, wire
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.xcoms import LoadXCom, PurgeXCom, XComRef
from spawnflow.models.run import DagRun, TaskInstance, XCom
from spawnflow.sdk import xcom
from spawnflow.services.records import NotFound, get_run, task_instance, unknown_task
from spawnflow.xcoms.dispatch import PURGE_TRIES


class XComEntry(msgspec.Struct):
    """One XCom as ``spawnflow xcom`` shows it."""

    task_id: str
    key: str
    #: ``database``, or the reference the backend gave (an object's URL).
    stored_in: str
    value: Any = None
    #: Why the value could not be read, if it could not.
    error: str | None = None
    #: The element of a mapped task that pushed it; -1 for an unmapped task.
    map_index: int = -1


def list_xcoms(settings: Settings, dag_id: str, run_id: str, task_id: str | None = None,
               key: str | None = None) -> list[XComEntry]:  # fmt: skip
    """The run's XComs (one task's, one key's), with their values resolved."""
    run = get_run(dag_id, run_id)
    query = (
        select(
            TaskInstance.task_id,
            TaskInstance.map_index,
            XCom.key,
            XCom.value,
            XCom.reference,
            XCom.size,
        )
        .join(TaskInstance, XCom.task_instance_id == TaskInstance.id)
        .where(TaskInstance.dag_run_id == run.id)
        .order_by(TaskInstance.id, XCom.key)
    )
    if task_id is not None:
        query = query.where(TaskInstance.task_id == task_id)
    if key is not None:
        query = query.where(XCom.key == key)
    with orm.session_scope(write=False) as session:
        rows = session.execute(query).all()
        if not rows and task_id is not None:
            ran = select(TaskInstance.id).where(
                TaskInstance.dag_run_id == run.id, TaskInstance.task_id == task_id
            )
            if session.scalar(ran) is None:  # a typo, rather than a task that pushed nothing
                raise unknown_task(session, dag_id, run.run_id, task_id)
    entries, helper = [], None
    try:
        for row in rows:
            if row.reference is None:
                entry = XComEntry(row.task_id, row.key, "database", map_index=row.map_index)
                entries.append(_decoded(entry, row.value))
                continue
            helper = helper or _helper(settings)
            ref = XComRef(dag_id, run_id, row.task_id, row.key, row.size or 0)
            answer = helper.call(
                lambda id, ref=ref, at=row.reference: LoadXCom(id=id, ref=ref, reference=at)
            )
            entry = XComEntry(row.task_id, row.key, row.reference, map_index=row.map_index)
            if isinstance(answer, wire.ErrorResponse):
                entry.error = answer.message
                entries.append(entry)
            else:
                entries.append(_decoded(entry, answer.value))
    finally:
        if helper is not None:
            helper.stop()
    return entries


def get_xcom(settings: Settings, dag_id: str, run_id: str, task_id: str, key: str,
             map_index: int = -1) -> XComEntry:  # fmt: skip
    """One XCom (of instance ``map_index`` of a mapped task), resolved; NotFound if the
    task never pushed ``key``, or, in one sentence naming the indexes, if ``map_index``
    is not one of the task's."""
    task_instance(dag_id, run_id, task_id, map_index)  # the task is (or is not) mapped
    found = [entry for entry in list_xcoms(settings, dag_id, run_id, task_id, key)
             if entry.map_index == map_index]  # fmt: skip
    if not found:
        which = f"task {task_id!r}" + (f" [{map_index}]" if map_index >= 0 else "")
        raise NotFound(f"{which} of run {run_id!r} of Dag {dag_id!r} has no XCom {key!r}")
    return found[0]


def purge(settings: Settings, stored: list[tuple[XComRef, str]]) -> list[str]:
    """Delete values a backend kept (after their rows were deleted), each tried up to
    :data:`PURGE_TRIES` times (a helper that died is replaced); what could not be."""
    if not stored:
        return []
    helper = _helper(settings)
    failures = []
    try:
        for ref, reference in stored:
            for attempt in range(PURGE_TRIES):
                if attempt:
                    time.sleep(0.5 * attempt)  # a backend's brief refusal may pass
                answer = helper.call(
                    lambda id, ref=ref, at=reference: PurgeXCom(id=id, ref=ref, reference=at)
                )
                if not isinstance(answer, wire.ErrorResponse):
                    break
            else:
                failures.append(f"{reference} ({answer.kind}: {answer.message})")
    finally:
        helper.stop()
    return failures


def stored_values(session: Any, run: DagRun, ti: TaskInstance) -> list[tuple[XComRef, str]]:
    """What a backend keeps for ``ti``'s XComs: (ref, reference) pairs to purge."""
    rows = session.execute(
        select(XCom.key, XCom.reference).where(
            XCom.task_instance_id == ti.id, XCom.reference.is_not(None)
        )
    ).all()
    return [(XComRef(run.dag_id, run.run_id, ti.task_id, row.key), row.reference) for row in rows]


def _helper(settings: Settings):
    from spawnflow.processors.worker.xcoms import answer_lookup
    from spawnflow.xcoms.calls import XComHelper

    # A backend reading Variables or Connections asks us: we may open the database.
    return XComHelper(settings, answer_request=answer_lookup)


def _decoded(entry: XComEntry, text: str | None) -> XComEntry:
    try:
        entry.value = None if text is None else xcom.decode(text)
    except xcom.XComError as error:
        entry.error = str(error)
    return entry
