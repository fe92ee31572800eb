"""A try's log: one JSON shape for every line, whoever wrote it (the supervisor, the task
process's loggers, its stdout and stderr), levels that match what happened, under each
start method (the scheduler runs in the test process; workers and tasks are children)."""

from __future__ import annotations

import json
import re

import pytest

from spawnflow.bootstrap import logs
from spawnflow.models import schema
from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
from spawnflow.processors.scheduler.job import Scheduler
from spawnflow.processors.scheduler.queueing import attempt_log
from spawnflow.services import listings
from spawnflow.services import runs as run_service
from tests.scheduler import harness

pytestmark = pytest.mark.process

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")

DAG = """
import logging, sys
from pathlib import Path

import structlog

from spawnflow import Dag, task

MARK = Path({mark!r})

with Dag("logs_one_shape", default_args={{"retries": 1, "retry_delay": 0}}):
    @task
    def talkative():
        print("printed to stdout")
        print("printed to stderr", file=sys.stderr)
        logging.getLogger("user.code").warning("logged by the task")
        structlog.get_logger("user.structlog").info("through structlog", rows=3, none=None)
        if not MARK.exists():
            MARK.write_text("failed once")
            raise RuntimeError("the first try fails on purpose")
        return "done"

    @task(retries=0)
    def doomed():
        raise RuntimeError("this task never succeeds")

    talkative()
    doomed()
"""


def _run(start_method, make_settings, tmp_path) -> dict[tuple[str, int], list[str]]:
    """Run the Dag once; the lines of each try's log, by (task, try)."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "logs_dag.py").write_text(DAG.format(mark=str(tmp_path / "mark")))
    url = f"sqlite:///{tmp_path.as_posix()}/s.db"
    settings = make_settings(**{
        "database.url": url, "core.dags_folder": str(dags), "core.load_examples": "false",
        "core.mp_start_method": start_method, "executor.parallelism": "2",
        "scheduler.loop_interval": "0.1",
    })  # fmt: skip
    schema.reset(url)
    summary = DagFileProcessorManager(settings).run(once=True)[0]
    assert summary.errors == {}, summary.errors
    run_id = harness.trigger("logs_one_shape")
    check = harness.deadline(120)
    Scheduler(settings, only_runs={run_id}).run(until=lambda: check(run_id))
    run = next(r for r in listings.list_runs() if r.id == run_id)
    tries = {("talkative", 1), ("talkative", 2), ("doomed", 1)}
    return {
        (task_id, number): attempt_log(settings, run.dag_id, run.run_id, task_id, number)
        .read_text(encoding="utf-8")
        .splitlines()
        for task_id, number in tries
    }


def test_every_line_of_a_tries_log_has_one_shape(start_method, make_settings, tmp_path):
    tries = _run(start_method, make_settings, tmp_path)

    for (task_id, number), lines in tries.items():
        events = [json.loads(line) for line in lines]  # every line parses
        where = f"{task_id} try {number}"
        assert {tuple(e)[:6] for e in events} == {logs.LINE_KEYS}, where
        assert [e["timestamp"] for e in events if not STAMP.fullmatch(e["timestamp"])] == []
        assert [e for e in events if None in e.values()] == [], where
    events = [json.loads(line) for line in tries[("talkative", 1)]]
    written = {(e["logger"], e["role"], e["event"]) for e in events}
    assert {
        ("spawnflow.supervisor", "supervisor", "task queued to this worker"),
        ("spawnflow.task", "task", "task started"),
        ("user.code", "task", "logged by the task"),
        # structlog imported by the Dag file, after the task process set up its logging
        ("user.structlog", "task", "through structlog"),
        ("task.stdout", "task", "printed to stdout"),
        ("task.stderr", "task", "printed to stderr"),
        ("spawnflow.supervisor", "supervisor", "task finished"),
    } <= written
    task_pids = {e["pid"] for e in events if e["role"] == "task"}
    assert len(task_pids) == 1, task_pids  # the output lines are the task process's own
    (structlog_line,) = [e for e in events if e["logger"] == "user.structlog"]
    assert structlog_line["rows"] == 3
    assert "none" not in structlog_line


def test_a_try_that_will_be_retried_ends_at_warning_and_a_failure_for_good_at_error(
    start_method, make_settings, tmp_path
):
    tries = _run(start_method, make_settings, tmp_path)

    def end(task_id: str, number: int) -> tuple[str, str]:
        (line,) = [e for e in map(json.loads, tries[(task_id, number)])
                   if e["event"] == "task finished"]  # fmt: skip
        return line["level"], line["state"]

    assert end("talkative", 1) == ("warning", "up_for_retry")
    assert end("talkative", 2) == ("info", "success")
    assert end("doomed", 1) == ("error", "failed")
    # What `spawnflow tasks logs` prints of them: no field that is None, no line keys.
    shown = [run_service.render_log_line(line) for line in tries[("talkative", 2)]]
    assert [line for line in shown if "None" in line] == []
    assert any(line.endswith("[stdout] printed to stdout") for line in shown), shown
    assert any(re.search(r"info +task finished state=success$", line) for line in shown), shown
