"""Task and Dag callbacks, and retries with exponential backoff, through the scheduler,
the local executor, supervisors, task processes and ``dag-callback`` children, under
each start method.

Callbacks write marker files whose folder is written into the Dag file's text (a task
process under forkserver or spawn does not see the test's environment changes).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import pytest

from spawnflow.bootstrap import logs
from spawnflow.comms import retries
from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
from spawnflow.processors.scheduler.job import Scheduler
from spawnflow.processors.scheduler.runs import aware
from spawnflow.services import listings
from spawnflow.services import runs as run_service
from tests.scheduler import harness
from tests.scheduler.test_decisions_db import Holding
from tests.scheduler.test_runs import _values, run_dag

pytestmark = pytest.mark.process

DAGS = """
import json
from pathlib import Path

from spawnflow import CommandTask, Dag, task

MARKS = Path({marks!r})
SHOWN = ("dag_id", "task_id", "run_id", "try_number", "state", "reason", "conf",
         "failed_task_ids")


def record(name):
    def callback(context):
        fields = {{key: context.get(key) for key in SHOWN}}
        fields["exception"] = repr(context.get("exception"))
        fields["logical_date"] = str(context.get("logical_date"))
        fields["has_task"] = "task" in context
        with open(MARKS / (name + ".jsonl"), "a") as file:
            file.write(json.dumps(fields) + "\\n")

    return callback


def raises(context):
    raise RuntimeError("the callback fails on purpose")


with Dag("calls_back", on_success_callback=record("dag_success"),
         on_failure_callback=record("dag_failure")):
    @task(on_execute_callback=record("execute"), on_success_callback=record("success"),
          on_failure_callback=record("failure"), on_retry_callback=record("retry"))
    def works():
        return "done"

    works() >> CommandTask("shell", "echo hi", on_success_callback=record("shell_success"))


with Dag("gives_up", default_args={{
        "retries": 1, "retry_delay": 0, "on_retry_callback": record("retry"),
        "on_failure_callback": record("failure"), "on_success_callback": record("success")}},
        on_failure_callback=record("dag_failure"), on_success_callback=record("dag_success")):
    @task
    def breaks():
        raise ValueError("this task always fails")

    breaks()


with Dag("callbacks_raise", on_success_callback=[raises, record("dag_after_raise")]):
    @task(on_execute_callback=raises, on_success_callback=[raises, record("after_raise")])
    def fine():
        return "fine"

    fine()


with Dag("callbacks_raise_on_failure", on_failure_callback=raises):
    @task(on_failure_callback=raises)
    def broken():
        raise ValueError("broken on purpose")

    broken()


with Dag("crashes", default_args={{
        "retries": 1, "retry_delay": 0, "on_retry_callback": record("retry"),
        "on_failure_callback": record("failure"), "on_success_callback": record("success")}}):
    @task
    def exits():
        import os

        os._exit(3)  # no outcome, no callbacks from this process

    exits()


with Dag("loses_its_supervisor", default_args={{
        "retries": 1, "retry_delay": 3600, "on_retry_callback": record("retry"),
        "on_failure_callback": record("failure")}}):
    @task
    def held():
        return "never runs: the test's executor holds it"

    held()


with Dag("backs_off", default_args={{"retries": 2, "retry_delay": 1,
                                     "retry_exponential_backoff": True,
                                     "max_retry_delay": 3}}):
    @task
    def third_time():
        tries = MARKS / "third_time"
        done = len(tries.read_text().splitlines()) if tries.exists() else 0
        with open(tries, "a") as file:
            file.write("try\\n")
        if done < 2:
            raise RuntimeError(f"try {{done + 1}} fails on purpose")
        return done + 1

    third_time()
"""


@pytest.fixture
def scheduling(start_method, make_settings, tmp_path):
    """Settings and marks for the Dags above, parsed into a fresh SQLite database."""
    from spawnflow.models import schema

    marks, dags = tmp_path / "marks", tmp_path / "dags"
    marks.mkdir()
    dags.mkdir()
    (dags / "callback_dags.py").write_text(DAGS.format(marks=str(marks)))
    url = f"sqlite:///{tmp_path.as_posix()}/s.db"
    values = {**_values(start_method, tmp_path, url), "core.load_examples": "false"}
    settings = make_settings(**values)
    schema.reset(url)
    summary = DagFileProcessorManager(settings).run(once=True)[0]
    assert summary.errors == {}, summary.errors
    return settings, marks


@pytest.fixture
def scheduler_log():
    """The events the scheduler (in this process) logs, with their fields."""
    events: list[tuple[str, dict]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            events.append((record.getMessage(), getattr(record, logs.FIELDS, {})))

    logger = logging.getLogger("spawnflow.scheduler")
    handler, level = Keep(level=logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield events
    logger.removeHandler(handler)
    logger.setLevel(level)


def marked(marks: Path, name: str) -> list[dict]:
    path = marks / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _run(run_id: int):
    return next(run for run in listings.list_runs() if run.id == run_id)


def test_task_and_dag_success_callbacks_fire_once_with_the_context(scheduling):
    settings, marks = scheduling
    run_id = run_dag(settings, "calls_back")
    run = _run(run_id)
    assert run.state == "success"
    (execute,) = marked(marks, "execute")
    (success,) = marked(marks, "success")
    assert (execute["task_id"], execute["try_number"], execute["run_id"]) == (
        "works", 1, run.run_id
    )  # fmt: skip
    assert (success["task_id"], success["exception"], success["has_task"]) == (
        "works", "None", True
    )  # fmt: skip
    assert [m["task_id"] for m in marked(marks, "shell_success")] == ["shell"]
    assert marked(marks, "failure") == marked(marks, "retry") == []
    (dag_success,) = marked(marks, "dag_success")
    assert dag_success == {
        "dag_id": "calls_back", "task_id": None, "run_id": run.run_id, "try_number": None,
        "state": "success", "reason": "success", "conf": {}, "failed_task_ids": [],
        "exception": "None", "logical_date": str(aware(run.logical_date)), "has_task": False,
    }  # fmt: skip
    assert marked(marks, "dag_failure") == []


def test_a_failed_try_calls_on_retry_and_the_last_one_on_failure_then_the_dags(scheduling):
    settings, marks = scheduling
    run_id = run_dag(settings, "gives_up")
    run = _run(run_id)
    assert run.state == "failed"
    (retry,) = marked(marks, "retry")
    (failure,) = marked(marks, "failure")
    assert (retry["try_number"], failure["try_number"]) == (1, 2)
    for call in (retry, failure):
        assert call["reason"] == "ValueError: this task always fails"
        assert call["exception"] == "ValueError('this task always fails')"
    assert marked(marks, "success") == []
    (dag_failure,) = marked(marks, "dag_failure")
    assert (dag_failure["state"], dag_failure["reason"], dag_failure["failed_task_ids"]) == (
        "failed", "task_failure", ["breaks"]
    )  # fmt: skip
    assert dag_failure["run_id"] == run.run_id
    assert marked(marks, "dag_success") == []


def test_callbacks_that_raise_are_logged_and_change_no_state(scheduling, scheduler_log):
    settings, marks = scheduling
    run_id = run_dag(settings, "callbacks_raise")
    ti = harness.task_instances(run_id)["fine"]
    assert (harness.run_state(run_id), ti.state, ti.try_number, ti.reason) == (
        "success", "success", 1, None
    )  # fmt: skip
    # The next callback in the list still ran, in the task process and in the child.
    assert len(marked(marks, "after_raise")) == len(marked(marks, "dag_after_raise")) == 1
    from spawnflow.processors.scheduler.queueing import attempt_log

    lines = run_service.read_log(
        attempt_log(settings, "callbacks_raise", _run(run_id).run_id, "fine", 1)
    )[0]
    failed = [line for line in lines if "callback failed" in line]
    assert len(failed) == 2, lines  # on_execute_callback's and on_success_callback's
    assert any("on_execute_callback" in line for line in failed)
    assert any("RuntimeError: the callback fails on purpose" in line for line in lines)
    dag_errors = [fields for event, fields in scheduler_log if event == "dag callback failed"]
    assert len(dag_errors) == 1, scheduler_log
    assert dag_errors[0]["dag_id"] == "callbacks_raise"
    assert "RuntimeError: the callback fails on purpose" in dag_errors[0]["error"]

    run_id = run_dag(settings, "callbacks_raise_on_failure")
    ti = harness.task_instances(run_id)["broken"]
    assert (harness.run_state(run_id), ti.state, ti.reason) == (
        "failed", "failed", "ValueError: broken on purpose"
    )  # fmt: skip
    dag_errors = [fields for event, fields in scheduler_log if event == "dag callback failed"]
    assert [fields["dag_id"] for fields in dag_errors] == [
        "callbacks_raise", "callbacks_raise_on_failure"
    ]  # fmt: skip


def test_exponential_backoff_is_stored_and_honoured_by_the_scheduler(scheduling):
    """A task that fails twice: each failed try's stored next-try time is its end plus
    the backoff for that try (base 1 s then 2 s, with the jitter, capped at 3 s), and
    the next try starts no earlier than it."""
    settings, _ = scheduling
    run_id = harness.trigger("backs_off")
    tries: dict[int, tuple] = {}

    def up_for_retry(number: int):
        check = harness.deadline(120)

        def reached() -> bool:
            check(None)
            ti = harness.task_instances(run_id)["third_time"]
            return ti.state == "up_for_retry" and ti.try_number == number

        return reached

    for failed_try in (1, 2):
        # The state lasts at least a second (the smallest wait), and a turn that began
        # before the worker wrote it cannot end it: the check after each turn sees it.
        Scheduler(settings, only_runs={run_id}).run(until=up_for_retry(failed_try))
        ti = harness.task_instances(run_id)["third_time"]
        tries[failed_try] = (aware(ti.start_date), aware(ti.end_date), aware(ti.next_try_at))
        wait = retries.retry_wait(
            1, failed_try, exponential_backoff=True, max_retry_delay=3,
            key=retries.try_key("backs_off", "third_time", ti.id, failed_try),
        )  # fmt: skip
        assert tries[failed_try][2] - tries[failed_try][1] == dt.timedelta(seconds=wait)
        assert (1, 2)[failed_try - 1] <= wait <= (2, 3)[failed_try - 1]
    check = harness.deadline(120)
    Scheduler(settings, only_runs={run_id}).run(until=lambda: check(run_id))
    ti = harness.task_instances(run_id)["third_time"]
    assert (harness.run_state(run_id), ti.state, ti.try_number) == ("success", "success", 3)
    assert tries[2][0] >= tries[1][2]  # try 2 started at its next-try time or after
    assert aware(ti.start_date) >= tries[2][2]


def test_a_task_process_that_dies_before_reporting_calls_the_failure_callbacks(scheduling):
    """No outcome came (``os._exit``, as after the OS killed it for memory): its
    supervisor calls on_retry_callback, then on_failure_callback after the last try, each
    in a new task process, as after an execution_timeout."""
    settings, marks = scheduling
    run_id = run_dag(settings, "crashes")
    ti = harness.task_instances(run_id)["exits"]
    died = "the task process exited with code 3 before reporting"
    assert (harness.run_state(run_id), ti.state, ti.try_number, ti.reason) == (
        "failed", "failed", 2, died
    )  # fmt: skip
    called = [(m["task_id"], m["try_number"], m["reason"], m["exception"])
              for m in marked(marks, "retry") + marked(marks, "failure")]  # fmt: skip
    assert called == [
        ("exits", 1, died, f"TaskProcessDied({died!r})"),
        ("exits", 2, died, f"TaskProcessDied({died!r})"),
    ]
    assert marked(marks, "success") == []


class Losing(Holding):
    """Holds what it is given, and once ``lose`` is set reports each held workload's
    worker lost (as the local executor does when a worker process dies)."""

    def __init__(self, slots: int):
        super().__init__(slots)
        self.lose, self.reported = False, False

    def events(self) -> list:
        if not self.lose or self.reported:
            return []
        from spawnflow.executors import WorkerLost

        self.reported = True
        return [WorkerLost(workload, "its worker was killed") for workload in self.held]


@pytest.mark.parametrize("lost", ["heartbeat", "worker"])
def test_a_try_whose_supervisor_was_lost_calls_its_callbacks_from_the_scheduler(
    scheduling, scheduler_log, lost
):
    """No task process is left to call them: the scheduler, which ends the try, calls
    the task's on_retry_callback (or on_failure_callback) in a dag-callback child, once
    its supervisor stopped heartbeating or its worker died."""
    from sqlalchemy import select

    from spawnflow.bootstrap import orm
    from spawnflow.models.run import TaskInstance

    settings, marks = scheduling
    run_id = harness.trigger("loses_its_supervisor")
    executor = Losing(1)
    Scheduler(settings, executor=executor, only_runs={run_id}).run(num_loops=1)
    assert [workload.task_id for workload in executor.held] == ["held"]
    silent_since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    with orm.session_scope() as session:  # what its supervisor wrote before it was lost
        ti = session.scalar(select(TaskInstance).where(
            TaskInstance.dag_run_id == run_id, TaskInstance.task_id == "held"
        ))  # fmt: skip
        ti.state, ti.start_date = "running", silent_since
        ti.try_number = executor.held[0].try_number
        ti.last_heartbeat = silent_since if lost == "heartbeat" else dt.datetime.now(dt.UTC)
    executor.lose = lost == "worker"
    check = harness.deadline(120)

    def called_back() -> bool:
        check(None)
        return any(event == "dag callback done" for event, _ in scheduler_log)

    Scheduler(settings, executor=executor, only_runs={run_id}).run(until=called_back)
    ti = harness.task_instances(run_id)["held"]
    reason = ("no heartbeat for 5 seconds: its supervisor is gone" if lost == "heartbeat"
              else "its worker was killed while it ran the task")  # fmt: skip
    assert (ti.state, ti.try_number, ti.reason) == ("up_for_retry", 1, reason)
    (retry,) = marked(marks, "retry")
    assert (retry["task_id"], retry["try_number"], retry["state"], retry["reason"]) == (
        "held", 1, "up_for_retry", reason
    )  # fmt: skip
    assert (retry["exception"], retry["has_task"]) == (f"TaskSupervisorLost({reason!r})", True)
    assert retry["run_id"] == _run(run_id).run_id
    assert marked(marks, "failure") == []
    (done,) = [fields for event, fields in scheduler_log if event == "dag callback done"]
    assert (done["task_id"], done["callback"]) == ("held", "on_retry_callback")
