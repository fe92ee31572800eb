"""``tasks render``: a task's template fields rendered for a run, without running it.

The Dag file is user code, and its templates may read Variables, Connections and
XComs: a task process renders them (under the executor's start method, as a try
would), asking this process, which answers from the database. An XCom is the one the
run stored; a date with no run has none.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spawnflow.bootstrap import wire
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.tasks import Done, Workload, XComPull, XComValue
from spawnflow.comms.templates import RenderedFields
from spawnflow.processors.worker.supervisor import TaskSupervisor
from spawnflow.sdk import xcom
from spawnflow.services.dags import get_dag
from spawnflow.services.records import NotFound, did_you_mean
from spawnflow.services.testing import InMemoryRecorder, ensure_parsed

RENDER_TARGET = "spawnflow.processors.task_runner:render_task"


@dataclass
class Rendered:
    """What ``tasks render`` found: each template field's text, or why rendering failed
    (with the task process's log, which holds a traceback if there was one)."""

    fields: dict[str, str]
    failure: str | None
    log_file: Path


class RenderRecorder(InMemoryRecorder):
    """Answers the rendering task process: stored XComs of the run, Variables and
    Connections from the database, and keeps the fields it sends."""

    def __init__(self, settings: Settings, run_id: str | None, dag_id: str):
        super().__init__(show=lambda _line: None)
        self.settings, self.run_id, self.dag_id = settings, run_id, dag_id
        self.fields: dict[str, str] = {}

    def answer(self, request: wire.Request) -> wire.Response:
        if isinstance(request, RenderedFields):
            self.fields = dict(request.fields)
            return Done(id=request.id)
        if isinstance(request, XComPull):
            return XComValue(id=request.id, value=self._stored(request.task_id, request.key))
        return super().answer(request)

    def _stored(self, task_id: str, key: str) -> str | None:
        from spawnflow.services.xcoms import list_xcoms

        if self.run_id is None:
            return None
        try:
            found = list_xcoms(self.settings, self.dag_id, self.run_id, task_id, key)
        except NotFound:  # a task that is not in the run: nothing pushed
            return None
        if not found or found[0].error is not None:
            return None
        return xcom.encode(found[0].value, key, task_id)


def render(settings: Settings, dag_id: str, task_id: str, *, run_id: str | None = None,
           logical_date: dt.datetime | None = None) -> Rendered:  # fmt: skip
    """Render ``task_id``'s template fields for the run ``run_id`` names, or for
    ``logical_date`` (its run's, if it has one), or for the Dag's latest run (now, if it
    has none). UserError for an unknown Dag, task or run."""
    ensure_parsed(settings, dag_id)
    model, document = get_dag(dag_id)
    if task_id not in document.task_ids:
        hint = did_you_mean(task_id, document.task_ids)
        raise UserError(f"Dag {dag_id!r} has no task {task_id!r}"
                        + (hint or f"; it has {', '.join(document.task_ids)}"))  # fmt: skip
    run = _run(dag_id, run_id, logical_date)
    if run is not None:
        moment = _aware(run.logical_date) or dt.datetime.now(dt.UTC)  # a run has one
        start, end = _aware(run.data_interval_start), _aware(run.data_interval_end)
        name, conf = run.run_id, json.loads(run.conf or "{}")
    else:
        moment = logical_date or dt.datetime.now(dt.UTC)
        start, end, name, conf = moment, moment, f"manual__{moment.isoformat()}", {}
    folder = Path(tempfile.mkdtemp(prefix="spawnflow-task-render-"))
    workload = Workload(
        ti_id=0, dag_id=dag_id, run_id=name, task_id=task_id, try_number=1,
        dag_file=model.fileloc, dags_folder=str(settings.core.dags_folder),
        logical_date=moment, data_interval_start=start, data_interval_end=end, conf=conf,
        params=document.params, execution_timeout=None, retry_delay=0.0,
        log_file=str(folder / "render.log"),
    )  # fmt: skip
    recorder = RenderRecorder(settings, run.run_id if run is not None else None, dag_id)
    supervisor = TaskSupervisor(workload, settings, recorder=recorder, target=RENDER_TARGET)
    state = supervisor.run()
    failure = None if state == "success" else supervisor.reason or f"the task process {state}"
    if failure is None:
        shutil.rmtree(folder, ignore_errors=True)  # kept only to show why it failed
    return Rendered(recorder.fields, failure, Path(workload.log_file))


def _run(dag_id: str, run_id: str | None, logical_date: dt.datetime | None) -> Any:
    """The run named, the run of ``logical_date`` (None if it has none), or the latest."""
    from sqlalchemy import select

    from spawnflow.bootstrap import orm
    from spawnflow.models.run import DagRun
    from spawnflow.services.records import get_run

    if run_id is not None:
        return get_run(dag_id, run_id)  # NotFound, with the runs it could be
    query = select(DagRun).where(DagRun.dag_id == dag_id)
    if logical_date is not None:
        query = query.where(DagRun.logical_date == logical_date)
    with orm.session_scope(write=False) as session:
        return session.scalars(query.order_by(DagRun.id.desc()).limit(1)).first()


def _aware(moment: dt.datetime | None) -> dt.datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=dt.UTC)
