"""Dag files and helpers for the scheduler's process tests.

Dag files get their marker folder written into their text: a task process under
forkserver or spawn does not see the test's environment changes.
"""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.processors.scheduler import runs

DAGS = """
import os, signal, sys, time
from pathlib import Path
from spawnflow import CommandTask, Dag, task

MARKS = Path({marks!r})


def mark(name, text="done"):
    with open(MARKS / name, "a") as file:
        file.write(text + "\\n")


def wait_for_gate(name):
    while not (MARKS / name).exists():
        time.sleep(0.05)


with Dag("retry_once", default_args={{"retries": 1, "retry_delay": 0}}):
    @task
    def flaky():
        tries = MARKS / "flaky"
        if not tries.exists():
            tries.write_text("failed once")
            raise RuntimeError("the first try fails on purpose")
        return "second time lucky"

    flaky()


with Dag("timeouts"):
    @task(execution_timeout=1)
    def sleeps():
        time.sleep(600)  # in C: no Python code runs until it returns

    @task(execution_timeout=1)
    def stubborn():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        time.sleep(600)

    @task(execution_timeout=1)
    def masked():
        import ctypes

        # SIGTERM and SIGINT stay pending, and libc's sleep() runs no Python code:
        # only a signal that cannot be blocked ends it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM, signal.SIGINT}})
        ctypes.CDLL(None).sleep(600)

    sleeps()
    stubborn()
    if hasattr(signal, "pthread_sigmask"):  # POSIX
        masked()


with Dag("self_kill"):
    @task
    def killed():
        import psutil

        psutil.Process().kill()  # SIGKILL on POSIX, TerminateProcess on Windows

    killed()


with Dag("bad_xcom"):
    @task
    def returns_an_object():
        return object()

    returns_an_object()


with Dag("modules"):
    @task
    def report():
        mine = sys.modules.get("spawnflow.bootstrap.orm")
        return {{
            "sqlalchemy": "sqlalchemy" in sys.modules,
            "own_engines": 0 if mine is None else sum(
                1 for key in mine._engines if key[0] == os.getpid()
            ),
        }}

    report()


with Dag("gated", default_args={{"retries": 1, "retry_delay": 0}}):
    @task
    def before():
        mark("before")

    @task
    def gate():
        wait_for_gate("open")
        mark("gate")

    @task
    def after():
        mark("after")

    before() >> gate() >> after()


with Dag("held"):
    @task
    def hold():
        mark("hold-started")  # the task process has booted and runs the task's code
        wait_for_gate("open")
        mark("held")

    hold()


with Dag("retried_after_a_hang", default_args={{"retries": 1, "retry_delay": 0}}):
    @task
    def hangs_once():
        first = not (MARKS / "first-try").exists()
        mark("first-try")
        if first:
            wait_for_gate("never")  # the test freezes its worker meanwhile

    hangs_once()


with Dag("held_with_child"):
    @task
    def hold_in_shell():
        # A process of the task's own (in its process group on POSIX), then the gate.
        import subprocess

        job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        (MARKS / "background").write_text(str(job.pid))
        wait_for_gate("open")

    hold_in_shell()


with Dag("reads_variable"):
    @task
    def read():
        from spawnflow.sdk.runtime import Variable

        return [Variable.get("greeting"), Variable.get("missing", default="fallback")]

    read()


with Dag("big_xcom"):
    @task
    def big():
        return "x" * 5000

    big()


with Dag("wide", max_active_tasks=16):
    for n in range(20):
        CommandTask(f"t{{n:02}}", f"echo t{{n:02}} $$ >> {{MARKS / 'wide'}}")
"""


def write_dags(folder: Path, marks: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    marks.mkdir(parents=True, exist_ok=True)
    path = folder / "scheduler_tests.py"
    path.write_text(DAGS.format(marks=str(marks)))
    return path


def trigger(dag_id: str) -> int:
    with orm.session_scope() as session:
        return runs.trigger_run(session, dag_id).id


def finished(run_id: int) -> bool:
    with orm.session_scope(write=False) as session:
        return session.get(DagRun, run_id).state in ("success", "failed")


def task_instances(run_id: int) -> dict[str, TaskInstance]:
    with orm.session_scope(write=False) as session:
        rows = session.scalars(select(TaskInstance).where(TaskInstance.dag_run_id == run_id))
        return {ti.task_id: ti for ti in rows}


def run_state(run_id: int) -> str:
    with orm.session_scope(write=False) as session:
        return session.get(DagRun, run_id).state


def deadline(seconds: float):
    """A callable for ``Scheduler.run(until=...)`` that fails the test past ``seconds``."""
    end = time.monotonic() + seconds

    def check(run_id: int | None = None) -> bool:
        if time.monotonic() > end:
            raise AssertionError(f"not finished within {seconds} seconds")
        return run_id is not None and finished(run_id)

    return check


LIMITS = """
import datetime as dt
from spawnflow import CommandTask, Dag, task

hour = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
with Dag("hourly_catchup", schedule="@hourly", start_date=hour - dt.timedelta(hours=5),
         catchup=True, max_active_runs=1):
    CommandTask("t", "exit 0")

with Dag("paused_daily", schedule="@daily", start_date=dt.datetime(2026, 1, 1)):
    CommandTask("t", "exit 0")

with Dag("narrow", max_active_tasks=3):
    for n in range(10):
        CommandTask(f"t{n}", "exit 0")
"""
