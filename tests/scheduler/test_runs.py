"""Dag runs through the scheduler, the local executor, supervisors and task processes,
under each start method (the scheduler runs in the test process; workers and task
processes are real children)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.executors.local import LocalExecutor
from spawnflow.models.run import XCom
from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
from spawnflow.processors.scheduler.job import Scheduler
from spawnflow.sdk import xcom
from spawnflow.services import listings
from spawnflow.services import runs as run_service
from tests.oskit import KILLED, POSIX
from tests.process.test_orphans import kill_if_running
from tests.process.test_stop import gone, running
from tests.scheduler import harness

pytestmark = pytest.mark.process


@pytest.fixture
def scheduling(start_method, make_settings, tmp_path):
    """Settings, Dags and a fresh SQLite database for scheduler tests under ``start_method``."""
    return _scheduling(
        start_method, make_settings, tmp_path, f"sqlite:///{tmp_path.as_posix()}/s.db"
    )


def _scheduling(method, make_settings, tmp_path, url, **extra):
    from spawnflow.models import schema

    marks = tmp_path / "marks"
    harness.write_dags(tmp_path / "dags", marks)
    settings = make_settings(**_values(method, tmp_path, url), **extra)
    schema.reset(url)
    summary = DagFileProcessorManager(settings).run(once=True)[0]
    assert summary.errors == {}, summary.errors
    return settings, marks


def _values(method, tmp_path, url) -> dict[str, str]:
    return {
        "database.url": url,
        "core.dags_folder": str(tmp_path / "dags"),
        "core.load_examples": "true",
        "core.mp_start_method": method,
        "core.stop_grace_period": "2",
        "executor.parallelism": "2",
        "executor.heartbeat_interval": "0.2",
        "scheduler.loop_interval": "0.1",
        "scheduler.task_heartbeat_timeout": "5",
        "scheduler.job_heartbeat_timeout": "3",
    }


def run_dag(settings, dag_id: str, seconds: float = 120, on_loop=None, executor=None) -> int:
    run_id = harness.trigger(dag_id)
    check = harness.deadline(seconds)
    Scheduler(settings, executor=executor, only_runs={run_id}, on_loop=on_loop).run(
        until=lambda: check(run_id)
    )
    return run_id


def test_the_example_dags_run_and_pass_data(scheduling):
    settings, _ = scheduling
    for dag_id in ("example_etl", "example_command", "example_fan_out_in"):
        run_id = run_dag(settings, dag_id)
        tis = harness.task_instances(run_id)
        assert harness.run_state(run_id) == "success", {t: ti.reason for t, ti in tis.items()}
        assert all(ti.state == "success" and ti.try_number == 1 for ti in tis.values())
    with orm.session_scope() as session:
        values = {row.key: xcom.decode(row.value) for row in session.scalars(select(XCom))}
    assert values  # the last run's XComs, from the fan-out example
    etl = next(iter(listings.list_runs("example_etl")))
    totals = _xcom(etl.id, "transform")
    assert totals == {"ada": 15.75, "grace": 7.0}


def _xcom(run_id: int, task_id: str):
    ti = harness.task_instances(run_id)[task_id]
    with orm.session_scope() as session:
        stored = session.scalar(select(XCom.value).where(XCom.task_instance_id == ti.id))
    return xcom.decode(stored)


def test_a_task_that_fails_once_succeeds_on_its_retry(scheduling):
    settings, _ = scheduling
    run_id = run_dag(settings, "retry_once")
    flaky = harness.task_instances(run_id)["flaky"]
    assert (harness.run_state(run_id), flaky.state, flaky.try_number) == ("success", "success", 2)
    first_try = run_service.read_log(_log(settings, run_id, "flaky", 1))[0]
    assert any("the first try fails on purpose" in line for line in first_try)
    assert _xcom(run_id, "flaky") == "second time lucky"


def _log(settings, run_id, task_id, attempt):
    from spawnflow.processors.scheduler.queueing import attempt_log

    run = next(r for r in listings.list_runs() if r.id == run_id)
    return attempt_log(settings, run.dag_id, run.run_id, task_id, attempt)


def test_execution_timeout_stops_a_task_in_native_code_or_ignoring_signals(scheduling):
    settings, _ = scheduling
    run_id = run_dag(settings, "timeouts")
    tis = harness.task_instances(run_id)
    assert harness.run_state(run_id) == "failed"
    assert tis["sleeps"].reason == (
        "execution_timeout of 1 seconds exceeded; the task process was stopped"
    )
    # SIGTERM and SIGINT ignored; both blocked while in C code (POSIX only).
    for stubborn in ("stubborn", "masked") if POSIX else ("stubborn",):
        assert tis[stubborn].reason == (
            "execution_timeout of 1 seconds exceeded; the task process was killed"
        ), stubborn


SLOW_IMPORT = """
import time
from pathlib import Path

from spawnflow import Dag, task

if Path({gate!r}).exists():  # in the task process only: the gate is made after parsing
    time.sleep({seconds})

with Dag("slow_import"):
    @task(execution_timeout={timeout})
    def quick():
        return "done"

    quick()
"""


def _slow_import(settings, tmp_path, seconds: float, run_settings=None, timeout: float = 1) -> int:
    """Parse the slow-importing Dag file with ``settings``, then run its task (whose
    ``execution_timeout`` is ``timeout``) with ``run_settings`` (``settings`` unless given)."""
    gate = tmp_path / "slow-import-gate"
    dags = Path(settings.core.dags_folder)
    source = SLOW_IMPORT.format(gate=str(gate), seconds=seconds, timeout=timeout)
    (dags / "slow_import.py").write_text(source)
    assert DagFileProcessorManager(settings).run(once=True)[0].errors == {}
    gate.touch()
    return run_dag(run_settings or settings, "slow_import")


def test_execution_timeout_counts_from_the_tasks_start_not_its_dag_files_import(
    scheduling, tmp_path
):
    """The Dag file takes 8 s to import in the task process, the task 4 s at most: it
    succeeds (on a busy machine a spawned task's import alone can take longer than a
    short timeout)."""
    settings, _ = scheduling
    run_id = _slow_import(settings, tmp_path, 8, timeout=4)
    ti = harness.task_instances(run_id)["quick"]
    assert (ti.state, ti.reason) == ("success", None)


def test_a_dag_file_that_hangs_on_import_still_ends_the_try(
    scheduling, start_method, make_settings, tmp_path
):
    settings, _ = scheduling
    # Parsed under the default timeout (a busy machine can take longer than 1 s to parse
    # the test Dags); run with a 1 s one, which the task process's import outlasts.
    url = f"sqlite:///{tmp_path.as_posix()}/s.db"
    impatient = {"dag_processor.file_parsing_timeout": "1"}
    run_id = _slow_import(
        settings, tmp_path, 600, make_settings(**_values(start_method, tmp_path, url), **impatient)
    )
    ti = harness.task_instances(run_id)["quick"]
    assert ti.state == "failed"
    assert ti.reason.startswith(
        "the Dag file did not import within [dag_processor] file_parsing_timeout (1 seconds) "
        "plus the task's execution_timeout (1); the task process was "
    ), ti.reason


def test_a_task_killed_from_outside_fails_saying_how_it_ended(scheduling):
    settings, _ = scheduling
    run_id = run_dag(settings, "self_kill")
    killed = harness.task_instances(run_id)["killed"]
    assert killed.state == "failed"
    assert killed.reason == f"the task process {KILLED} before reporting"


def test_an_xcom_that_cannot_be_stored_fails_the_task_naming_key_and_type(scheduling):
    settings, _ = scheduling
    run_id = run_dag(settings, "bad_xcom")
    ti = harness.task_instances(run_id)["returns_an_object"]
    assert ti.state == "failed"
    assert ti.reason.startswith(
        "XCom 'return_value' of task 'returns_an_object' is a builtins.object, which cannot "
        "be stored as an XCom"
    )


def test_a_task_process_never_imports_sqlalchemy(scheduling, start_method):
    settings, _ = scheduling
    run_id = run_dag(settings, "modules")
    report = _xcom(run_id, "report")
    if start_method == "fork":
        # A fork child is a copy of its worker, which holds an engine: it has the
        # modules, but the engines are the worker's and it opens none of its own.
        assert report["own_engines"] == 0
    else:
        assert report == {"sqlalchemy": False, "own_engines": 0}


def test_a_worker_killed_mid_task_fails_the_task_and_counts_as_lost(scheduling):
    settings, _ = scheduling
    executor = LocalExecutor(settings)
    run_id = harness.trigger("held")
    killed = []

    def kill_the_worker(summary) -> None:
        hold = harness.task_instances(run_id)["hold"]
        if not killed and hold.state == "running" and hold.worker_pid:
            psutil.Process(hold.worker_pid).kill()
            killed.append(hold.worker_pid)

    check = harness.deadline(120)
    Scheduler(settings, executor=executor, only_runs={run_id}, on_loop=kill_the_worker).run(
        until=lambda: check(run_id)
    )
    hold = harness.task_instances(run_id)["hold"]
    assert killed, "the task never ran"
    assert (hold.state, hold.reason) == (
        "failed", f"its executor worker (pid {killed[0]}) {KILLED} while it ran the task",
    )  # fmt: skip
    assert executor.lost_workers == 1


def test_a_worker_killed_mid_task_takes_the_task_and_what_it_started_along(scheduling):
    settings, marks = scheduling
    run_id = harness.trigger("held_with_child")
    seen: dict[str, int] = {}

    def kill_the_worker(summary) -> None:
        ti = harness.task_instances(run_id)["hold_in_shell"]
        background = marks / "background"
        if not seen and ti.state == "running" and ti.task_pid and background.exists():
            text = background.read_text().strip()
            if text:
                seen.update(task=ti.task_pid, background=int(text), worker=ti.worker_pid)
                psutil.Process(ti.worker_pid).kill()

    check = harness.deadline(120)
    try:
        Scheduler(settings, only_runs={run_id}, on_loop=kill_the_worker).run(
            until=lambda: check(run_id)
        )
        ti = harness.task_instances(run_id)["hold_in_shell"]
        assert seen, "the task never ran"
        assert ti.reason.startswith(f"its executor worker (pid {seen['worker']}) {KILLED}")
        assert gone(seen["task"]), "the task process outlived its worker"
        assert gone(seen["background"]), "what the task started outlived its worker"
    finally:
        kill_if_running(*seen.values())


def _stopped_from_outside(settings, run_id: int, task_id: str, attempt: int) -> bool:
    log = _log(settings, run_id, task_id, attempt).read_text()
    return "stopped: the task instance was changed from outside" in log


def test_mark_failed_stops_a_running_task_within_a_heartbeat(scheduling):
    settings, marks = scheduling
    run_id = harness.trigger("held")
    dag_run = next(r for r in listings.list_runs("held") if r.id == run_id)
    task_pid: list[int] = []

    def mark_the_task_failed(summary) -> None:
        hold = harness.task_instances(run_id)["hold"]
        if not task_pid and hold.state == "running" and hold.task_pid:
            run_service.mark_failed("held", dag_run.run_id, "hold")
            task_pid.append(hold.task_pid)

    check = harness.deadline(120)
    # The scheduler keeps going until the task process is gone: its supervisor, not
    # the executor's shutdown, must have stopped it.
    Scheduler(settings, only_runs={run_id}, on_loop=mark_the_task_failed).run(
        until=lambda: check(run_id) and bool(task_pid) and not running(task_pid[0])
    )
    hold = harness.task_instances(run_id)["hold"]
    assert (hold.state, hold.reason) == ("failed", "marked failed from the CLI")
    assert _stopped_from_outside(settings, run_id, "hold", 1)
    assert not (marks / "held").exists()


def test_clearing_a_running_task_stops_it_before_it_runs_again(scheduling):
    settings, marks = scheduling
    run_id = harness.trigger("held")
    dag_run = next(r for r in listings.list_runs("held") if r.id == run_id)
    first: list[int] = []
    first_alive_during_second: list[bool] = []

    def clear_then_open(summary) -> None:
        hold = harness.task_instances(run_id)["hold"]
        if not first:
            if hold.state == "running" and hold.task_pid:
                first.append(hold.task_pid)
                run_service.clear("held", dag_run.run_id, ["hold"])
            return
        second = hold.try_number == 2 and hold.state == "running" and hold.task_pid
        if second and not first_alive_during_second:
            first_alive_during_second.append(running(first[0]))
            (marks / "open").touch()

    check = harness.deadline(120)
    Scheduler(settings, only_runs={run_id}, on_loop=clear_then_open).run(
        until=lambda: check(run_id)
    )
    hold = harness.task_instances(run_id)["hold"]
    assert (hold.state, hold.try_number) == ("success", 2)
    assert first_alive_during_second == [False], "the second try ran beside the first"
    assert _stopped_from_outside(settings, run_id, "hold", 1)
    assert (marks / "held").read_text().splitlines() == ["done"]  # only the second try did


def test_clearing_a_task_removes_its_xcoms_and_runs_it_again(scheduling):
    settings, _ = scheduling
    run_id = run_dag(settings, "example_etl")
    dag_run = next(r for r in listings.list_runs("example_etl") if r.id == run_id)
    assert _xcom(run_id, "transform") == {"ada": 15.75, "grace": 7.0}

    run_service.clear("example_etl", dag_run.run_id, ["transform", "load"])

    tis = harness.task_instances(run_id)
    assert tis["transform"].state == "none"
    with orm.session_scope() as session:
        assert (
            session.scalar(select(XCom).where(XCom.task_instance_id == tis["transform"].id)) is None
        )
    check = harness.deadline(120)
    Scheduler(settings, only_runs={run_id}).run(until=lambda: check(run_id))
    assert harness.run_state(run_id) == "success"
    assert _xcom(run_id, "transform") == {"ada": 15.75, "grace": 7.0}
    assert harness.task_instances(run_id)["transform"].try_number == 2


def test_variables_reach_tasks_through_their_supervisor(scheduling):
    settings, _ = scheduling
    run_service.set_variable("greeting", "hello")
    run_id = run_dag(settings, "reads_variable")
    assert _xcom(run_id, "read") == ["hello", "fallback"]


def test_an_xcom_over_max_xcom_size_fails_the_task(start_method, make_settings, tmp_path):
    url = f"sqlite:///{tmp_path.as_posix()}/x.db"
    settings, _ = _scheduling(
        start_method, make_settings, tmp_path, url, **{"core.max_xcom_size": "1000"}
    )
    run_id = run_dag(settings, "big_xcom")
    big = harness.task_instances(run_id)["big"]
    assert (big.state, big.reason) == (
        "failed", "XCom 'return_value' of task 'big' is 5002 bytes; [core] max_xcom_size is 1000",
    )  # fmt: skip


def test_a_worker_that_stops_answering_is_stopped_and_its_task_retried(scheduling):
    settings, marks = scheduling
    executor = LocalExecutor(settings)
    run_id = harness.trigger("retried_after_a_hang")
    frozen: list[int] = []

    def freeze_the_worker(summary) -> None:
        ti = harness.task_instances(run_id)["hangs_once"]
        if not frozen and ti.state == "running" and (marks / "first-try").exists():
            psutil.Process(ti.worker_pid).suspend()  # SIGSTOP; NtSuspendProcess on Windows
            frozen.append(ti.worker_pid)

    check = harness.deadline(180)
    try:
        # The retry may run on the other worker before the frozen one is found out: wait
        # for both.
        Scheduler(settings, executor=executor, only_runs={run_id}, on_loop=freeze_the_worker).run(
            until=lambda: check(run_id) and executor.lost_workers > 0
        )
    finally:
        kill_if_running(*frozen)
    ti = harness.task_instances(run_id)["hangs_once"]
    assert frozen, "the task never ran"
    assert (ti.state, ti.try_number) == ("success", 2)
    assert executor.lost_workers == 1
    assert gone(frozen[0]), "the frozen worker was not stopped"
