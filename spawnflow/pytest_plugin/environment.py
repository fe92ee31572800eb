"""``spawnflow_env``: a throw-away spawnflow (home, Dags folder, migrated database) in
which a test runs Dags and tasks through real task processes under one start method."""

from __future__ import annotations

import datetime as dt
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.settings import Override, Settings


@dataclass
class TaskResult:
    """How one task instance of a tested run ended."""

    task_id: str
    state: str
    #: Tries it took (its last try's number).
    tries: int
    reason: str | None
    #: What it pushed, by key (``return_value`` for what it returned).
    xcoms: dict[str, Any]
    #: Its last try's log, as ``spawnflow tasks logs`` prints it.
    log: str

    #: Which instance of a mapped task it is; -1 for an unmapped task.
    map_index: int = -1

    @property
    def return_value(self) -> Any:
        return self.xcoms.get("return_value")


@dataclass
class MappedTaskResult:
    """How the instances of a mapped task ended: ``result["task"][i]`` is instance i."""

    task_id: str
    #: In map-index order.
    instances: list[TaskResult]

    def __getitem__(self, map_index: int) -> TaskResult:
        return self.instances[map_index]

    def __len__(self) -> int:
        return len(self.instances)

    @property
    def state(self) -> str:
        """``success`` if every instance succeeded, else the first other state."""
        return next((i.state for i in self.instances if i.state != "success"), "success")

    @property
    def return_value(self) -> list[Any]:
        """The instances' results in map-index order, as a task downstream receives them."""
        return [instance.return_value for instance in self.instances]


@dataclass
class DagRunResult:
    """How a tested Dag run ended, with each of its task instances."""

    dag_id: str
    run_id: str
    state: str
    start_method: str
    #: By task id; a mapped task's instances together.
    tasks: dict[str, TaskResult | MappedTaskResult] = field(default_factory=dict)

    def __getitem__(self, task_id: str) -> TaskResult | MappedTaskResult:
        return self.tasks[task_id]

    @property
    def succeeded(self) -> bool:
        return self.state == "success"

    def assert_succeeded(self) -> None:
        """Fail the test, saying which tasks failed and why (with their logs' ends), unless
        the run succeeded."""
        if self.succeeded:
            return
        lines = [f"run {self.run_id!r} of Dag {self.dag_id!r} under {self.start_method}: "
                 f"{self.state}"]  # fmt: skip
        for found in self.tasks.values():
            for task in found.instances if isinstance(found, MappedTaskResult) else [found]:
                if task.state != "success":
                    which = f"{task.task_id!r}" + (f" [{task.map_index}]"
                                                   if task.map_index >= 0 else "")  # fmt: skip
                    lines.append(f"  task {which}: {task.state}"
                                 + (f" ({task.reason})" if task.reason else ""))  # fmt: skip
                    lines += [f"    | {line}" for line in task.log.splitlines()[-15:]]
        raise AssertionError("\n".join(lines))


class DagCheckFailed(AssertionError):
    """``check_dag_file`` found a difference between start methods or a failing task."""


class SpawnflowEnv:
    """A spawnflow of the test's own: ``home``, ``dags_folder``, ``database_url`` and the
    ``start_method`` its processes use (the task's own ``multiprocessing`` default too)."""

    def __init__(self, home: Path, database_url: str, start_method: str) -> None:
        self.home = home
        self.dags_folder = home / "dags"
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        self.database_url = database_url
        self.start_method = start_method
        overrides = {
            "core.dags_folder": str(self.dags_folder),
            "core.load_examples": "false",
            "core.mp_start_method": start_method,
            "executor.task_mp_start_method": "same",
            "database.url": database_url,
        }
        self.settings: Settings = settings_module.resolve(
            environ={"SPAWNFLOW_HOME": str(home)},
            overrides=[Override(k, v, "spawnflow_env") for k, v in overrides.items()],
        )
        settings_module.install(self.settings)

    def add_dag_file(self, name: str, source: str) -> Path:
        """Write a Dag file (``source`` dedented) into the Dags folder; its path."""
        path = self.dags_folder / (name if name.endswith(".py") else f"{name}.py")
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        return path

    def run_dag(self, dag: Any, conf: dict[str, Any] | None = None, *,
                logical_date: dt.datetime | None = None) -> DagRunResult:  # fmt: skip
        """Run a Dag (its id, or the Dag object) once through the scheduler's code and
        real task processes, as ``spawnflow dags test`` does; how it ended."""
        from spawnflow.services import testing

        dag_id = dag if isinstance(dag, str) else dag.dag_id
        started: list[str] = []
        run, tis = testing.test_dag(self.settings, dag_id, conf, lambda _: None, started.append,
                                    logical_date=logical_date)  # fmt: skip
        result = DagRunResult(dag_id, run.run_id, run.state, self.start_method)
        xcoms = self._xcoms(dag_id, run.run_id)
        for ti in tis:  # a mapped task's instances in map-index order
            found = TaskResult(
                ti.task_id, ti.state, ti.try_number, ti.reason,
                xcoms.get((ti.task_id, ti.map_index), {}),
                self._log(dag_id, run.run_id, ti.task_id, ti.try_number, ti.map_index),
                ti.map_index,
            )  # fmt: skip
            if ti.map_index < 0:
                result.tasks[ti.task_id] = found
            else:
                mapped = result.tasks.setdefault(ti.task_id, MappedTaskResult(ti.task_id, []))
                assert isinstance(mapped, MappedTaskResult)
                mapped.instances.append(found)
        return result

    def run_task(self, dag_id: str, task_id: str,
                 upstream_xcoms: dict[str, Any] | None = None) -> TaskResult:  # fmt: skip
        """Run one task once in a task process, writing no state, as ``spawnflow tasks
        test`` does; ``upstream_xcoms`` by ``task_id`` or ``task_id.key``. A pulled XCom
        that is not given fails the task."""
        from spawnflow.sdk import xcom
        from spawnflow.services import testing

        upstream = {}
        for name, value in (upstream_xcoms or {}).items():
            task, _, key = name.partition(".")
            key = key or "return_value"
            upstream[(task, key)] = xcom.encode(value, key, task)
        ran = testing.test_task(self.settings, dag_id, task_id, lambda _: None,
                                upstream=upstream, strict=True, map_index=None)  # fmt: skip
        log = ran.log_file.read_text(encoding="utf-8") if ran.log_file.exists() else ""
        values = {key: xcom.decode(value) for key, value in ran.xcoms.items()}
        return TaskResult(task_id, ran.state, 1, ran.reason, values, _rendered(log))

    def check_dag_file(self, path: str | Path, *, parse_only: bool = False,
                       task_timeout: float = 60.0) -> None:  # fmt: skip
        """``spawnflow dags check`` as an assertion: parse ``path`` under every start
        method this machine has and run each task under each; raise
        :class:`DagCheckFailed` saying what differs (and the likely cause) or what fails."""
        from spawnflow.bootstrap import startmethods
        from spawnflow.services import dag_check

        methods = list(startmethods.available())
        timeout = self.settings.dag_processor.file_parsing_timeout
        parsed = dag_check.check_file(str(Path(path).resolve()), methods, timeout,
                                      str(self.dags_folder))  # fmt: skip
        ran: list[dag_check.TaskRun] = []
        if not parse_only and all(r.ok for r in parsed):
            for result in parsed:
                ran += dag_check.check_tasks(self.settings, result.method, result.documents,
                                             task_timeout)  # fmt: skip
        report = dag_check.Report(str(path), parsed, ran, parse_only)
        if report.passed:
            return
        problems = [f"{r.method}: the file does not load: {r.error}" for r in parsed if not r.ok]
        problems += [str(difference) for difference in report.differences]
        problems += [f"task {task_id!r} of Dag {dag_id!r} fails under every start method: {why}"
                     for (dag_id, task_id), why in report.failing_everywhere.items()]  # fmt: skip
        raise DagCheckFailed(f"{path} is not start-method safe ({report.summary()}):\n- "
                             + "\n- ".join(problems))  # fmt: skip

    def _xcoms(self, dag_id: str, run_id: str) -> dict[tuple[str, int], dict[str, Any]]:
        """What each task instance pushed, by (task id, map index) and key."""
        from spawnflow.services import xcoms

        found: dict[tuple[str, int], dict[str, Any]] = {}
        for entry in xcoms.list_xcoms(self.settings, dag_id, run_id):
            found.setdefault((entry.task_id, entry.map_index), {})[entry.key] = entry.value
        return found

    def _log(self, dag_id: str, run_id: str, task_id: str, tries: int, map_index: int) -> str:
        from spawnflow.processors.scheduler.queueing import attempt_log
        from spawnflow.services import runs

        if tries < 1:
            return ""
        path = attempt_log(self.settings, dag_id, run_id, task_id, tries, map_index)
        return "\n".join(runs.read_log(path)[0])


def _rendered(text: str) -> str:
    from spawnflow.services import runs

    return "\n".join(runs.render_log_line(line) for line in text.splitlines())
