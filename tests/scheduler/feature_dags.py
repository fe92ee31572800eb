"""Dags that use every feature of issue 18 (branching, short-circuit, task groups with
``>>``/``<<`` between groups and tasks, task and Dag callbacks, one that raises, one that
ends the task process, retries with exponential backoff), and how to read what their
callbacks marked. Run end to end by tests/scheduler/test_features_e2e.py, through a
real scheduler (``spawnflow standalone``) and through ``spawnflow dags test``.

Callbacks write marker files in a folder written into the Dag file's text: a task
process under forkserver or spawn does not see the test's environment.
"""

from __future__ import annotations

import json
from pathlib import Path

DAG_IDS = ("e2e_branching", "e2e_callbacks", "e2e_bad_branch", "e2e_backoff", "e2e_timeout")

TEXT = """
import datetime as dt
import json
import os
import threading
import time
from pathlib import Path

from spawnflow import Dag, TaskGroup, TriggerRule, task

MARKS = Path({marks!r})
START = dt.datetime(2026, 1, 1)  # @daily, no catch-up: one run is due


def record(name):
    def callback(context):
        fields = {{key: context.get(key) for key in (
            "dag_id", "task_id", "run_id", "try_number", "state", "reason", "failed_task_ids")}}
        fields["exception"] = type(context.get("exception")).__name__
        with open(MARKS / (name + ".jsonl"), "a") as file:
            file.write(json.dumps(fields) + "\\n")

    return callback


def raises(context):
    raise RuntimeError("the callback fails on purpose")


def exits(context):
    os._exit(3)  # the task process dies after it reported the try's outcome


with Dag("e2e_branching", schedule="@daily", start_date=START):

    @task.branch
    def choose():
        return "wanted"  # a task group: its first tasks run

    @task
    def step(n):
        return n

    with TaskGroup("wanted") as wanted:  # wanted.step >> wanted.step__1
        step(1) >> step(2)
    with TaskGroup("unwanted") as unwanted:
        step(3)

    @task(trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
    def join():
        return "joined"

    @task.short_circuit
    def gate():
        return False  # skips every task downstream, whatever its trigger rule

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def audit():
        return "never"

    with TaskGroup("tail") as tail:
        step(4)
    with TaskGroup("checks") as checks:
        step(5)
    with TaskGroup("report") as report:
        step(6) >> step(7)

    joined, gated = join(), gate()
    choose() >> [wanted, unwanted] >> joined  # a task >> groups >> a task
    joined >> gated >> tail  # a task >> a group
    audit() << tail  # a task << a group
    checks << joined  # a group << a task
    checks >> report  # a group >> a group


with Dag("e2e_callbacks", schedule="@daily", start_date=START,
         on_success_callback=[raises, record("dag_success")],
         on_failure_callback=record("dag_failure")):

    @task(on_execute_callback=record("execute"), on_success_callback=[raises, record("success")],
          on_failure_callback=record("failure"), on_retry_callback=record("retry"))
    def works():
        return "done"

    @task(on_success_callback=exits)
    def dies_after():
        return "reported"

    works() >> dies_after()


with Dag("e2e_bad_branch", schedule="@daily", start_date=START,
         on_failure_callback=record("dag_failure")):

    @task.branch(on_success_callback=record("success"),
                 on_failure_callback=record("failure"))
    def lost():
        return "nowhere"

    @task
    def there():
        return 1

    lost() >> there()


with Dag("e2e_backoff", schedule="@daily", start_date=START,
         default_args={{"retries": 2, "retry_delay": 1, "retry_exponential_backoff": True,
                       "max_retry_delay": 2, "on_retry_callback": record("retry")}}):

    @task
    def third_time():
        tries = MARKS / "third_time"
        before = tries.read_text().split() if tries.exists() else []
        with open(tries, "a") as file:
            file.write(f"{{time.time()}}\\n")
        if len(before) < 2:
            raise RuntimeError(f"try {{len(before) + 1}} fails on purpose")
        return len(before) + 1

    third_time()


with Dag("e2e_timeout", schedule="@daily", start_date=START):

    @task(execution_timeout=1, on_failure_callback=record("failure"),
          on_success_callback=record("success"))
    def hangs():
        threading.Event().wait(600)  # until its supervisor stops it

    hangs()
"""

#: How each Dag's run ends, task by task.
STATES = {
    "e2e_branching": {
        "choose": "success",
        "wanted.step": "success",
        "wanted.step__1": "success",
        "unwanted.step": "skipped",
        "join": "success",
        "gate": "success",
        "tail.step": "skipped",
        "audit": "skipped",
        "checks.step": "success",
        "report.step": "success",
        "report.step__1": "success",
    },
    "e2e_callbacks": {"works": "success", "dies_after": "success"},
    "e2e_bad_branch": {"lost": "failed", "there": "upstream_failed"},
    "e2e_backoff": {"third_time": "success"},
    "e2e_timeout": {"hangs": "failed"},
}
FAILING = ("e2e_bad_branch", "e2e_timeout")
RUN_STATES = {dag_id: "failed" if dag_id in FAILING else "success" for dag_id in DAG_IDS}

BAD_BRANCH = (
    "branch task 'lost' returned 'nowhere', which Dag 'e2e_bad_branch' has no task or task "
    "group of; it can follow 'there'"
)


#: Stopped warm, or killed after its grace period where a stop cannot interrupt the
#: wait (Windows).
TIMED_OUT = tuple(
    f"execution_timeout of 1 seconds exceeded; the task process was {how}"
    for how in ("stopped", "killed")
)


def write(folder: Path, marks: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    marks.mkdir(parents=True, exist_ok=True)
    path = folder / "feature_dags.py"
    path.write_text(TEXT.format(marks=str(marks)), encoding="utf-8")
    return path


def marked(marks: Path, name: str) -> list[dict]:
    path = marks / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def try_log(logs: Path, dag_id: str, task_id: str, attempt: int = 1) -> str:
    """The text of a try's log (its run is the only one of its Dag)."""
    (path,) = logs.glob(f"dag_id={dag_id}/run_id=*/task_id={task_id}/attempt={attempt}.log")
    return path.read_text(encoding="utf-8")


def check_callbacks_and_backoff(marks: Path, logs: Path, dags: list[str]) -> None:
    """What the callbacks and the retries of ``dags`` left behind, whoever ran them."""
    if "e2e_callbacks" in dags:
        assert [m["task_id"] for m in marked(marks, "execute")] == ["works"]
        (success,) = marked(marks, "success")  # after the one that raised
        assert (success["task_id"], success["try_number"], success["reason"]) == ("works", 1, None)
        failed = [m for m in marked(marks, "failure") + marked(marks, "retry")
                  if m["dag_id"] == "e2e_callbacks"]  # fmt: skip
        assert failed == []
        (dag_success,) = marked(marks, "dag_success")
        assert (dag_success["dag_id"], dag_success["state"]) == ("e2e_callbacks", "success")
        works = try_log(logs, "e2e_callbacks", "works")
        assert works.count("callback failed") == 1, works  # logged; the state is success
        assert "RuntimeError: the callback fails on purpose" in works
        dies = try_log(logs, "e2e_callbacks", "dies_after")
        assert "the task process died after it reported the try's outcome" in dies, dies
        assert "exited with code 3" in dies
    if "e2e_bad_branch" in dags:
        # Failed in the task process: on_failure_callback ran, on_success_callback not.
        failures = [m for m in marked(marks, "failure") if m["dag_id"] == "e2e_bad_branch"]
        assert [(m["task_id"], m["reason"], m["exception"]) for m in failures] == [
            ("lost", BAD_BRANCH, "TaskFailed")
        ]
        assert [m for m in marked(marks, "success") if m["dag_id"] == "e2e_bad_branch"] == []
        (dag_failure,) = marked(marks, "dag_failure")  # only e2e_bad_branch has one that ran
        assert (dag_failure["dag_id"], dag_failure["failed_task_ids"]) == (
            "e2e_bad_branch", ["lost", "there"]
        )  # fmt: skip
    if "e2e_backoff" in dags:
        retried = [m for m in marked(marks, "retry") if m["dag_id"] == "e2e_backoff"]
        assert [(m["try_number"], m["reason"]) for m in retried] == [
            (1, "RuntimeError: try 1 fails on purpose"),
            (2, "RuntimeError: try 2 fails on purpose"),
        ]
        starts = [float(line) for line in (marks / "third_time").read_text().split()]
        assert len(starts) == 3
        # The scheduler queues no try before its stored time: try 2 waits at least the
        # base of 1 s (plus a jitter below 1 s), try 3 the cap of 2 s.
        assert starts[1] - starts[0] >= 1.0
        assert starts[2] - starts[1] >= 2.0
    if "e2e_timeout" in dags:
        # Stopped by its supervisor, then its on_failure_callback ran in a new task
        # process, as Airflow calls it on a timeout.
        failures = [m for m in marked(marks, "failure") if m["dag_id"] == "e2e_timeout"]
        assert [(m["task_id"], m["exception"]) for m in failures] == [("hangs", "ExecutionTimeout")]
        assert failures[0]["reason"] in TIMED_OUT
        assert [m for m in marked(marks, "success") if m["dag_id"] == "e2e_timeout"] == []
        log = try_log(logs, "e2e_timeout", "hangs")
        assert "calling the task's failure callbacks in a new task process" in log, log
