"""Deferred tasks through the scheduler, the triggerer and its trigger runner, under each
start method, on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import socket

import psutil
import pytest

from spawnflow.comms.states import TaskState
from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
from spawnflow.processors.scheduler.job import Scheduler
from tests.scheduler import harness
from tests.scheduler.test_runs import _xcom
from tests.triggerer.harness import (
    log_events,
    marks_of,
    start_triggerer,
    task_instance,
    trigger_rows,
    wait_for,
    write_dags,
)

pytestmark = pytest.mark.process


@pytest.fixture
def deferring(start_method, make_settings, tmp_path, deferral_url):
    """Settings, Dags and a fresh database; the triggerer tests' paths."""
    return set_up(start_method, make_settings, tmp_path, deferral_url)


def set_up(start_method, make_settings, tmp_path, url, watchers=True, **extra):
    from spawnflow.models import schema

    gates, marks = tmp_path / "gates", tmp_path / "marks"
    write_dags(tmp_path / "dags", gates, marks, watchers=watchers)
    settings = make_settings(**{
        "database.url": url, "core.dags_folder": str(tmp_path / "dags"),
        "core.load_examples": "false", "core.mp_start_method": start_method,
        "core.stop_grace_period": "2", "executor.parallelism": "1",
        "executor.heartbeat_interval": "0.2", "scheduler.loop_interval": "0.1",
        "triggerer.poll_interval": "0.1", "triggerer.heartbeat_timeout": "3", **extra,
    })  # fmt: skip
    schema.reset(url)
    summary = DagFileProcessorManager(settings).run(once=True)[0]
    assert summary.errors == {}, summary.errors
    return settings, gates, marks


def schedule_until(settings, run_ids: set[int] | None, condition, on_loop=None, seconds=150):
    check = harness.deadline(seconds)
    Scheduler(settings, only_runs=run_ids, on_loop=on_loop).run(
        until=lambda: check() or condition()
    )


def test_a_deferred_task_frees_its_worker_and_resumes_with_the_event(deferring):
    settings, _, marks = deferring
    waiting = harness.trigger("waits_for_a_gate")
    opener: list[int] = []
    triggerer = start_triggerer(settings)

    def open_the_gate_once_it_waits(_summary) -> None:
        # One worker only: the second Dag can run only if the deferred task let go of it.
        if not opener and task_instance(waiting, "waits").state == TaskState.DEFERRED:
            opener.append(harness.trigger("opens_the_gate"))

    try:
        schedule_until(settings, None, lambda: harness.finished(waiting),
                       on_loop=open_the_gate_once_it_waits)  # fmt: skip
    finally:
        triggerer.stop(grace=5)

    waits = task_instance(waiting, "waits")
    assert (waits.state, waits.try_number) == ("success", 1), waits.reason
    assert harness.run_state(opener[0]) == "success"
    assert _xcom(waiting, "waits") == {"path": "open", "note": "kept"}
    assert len(marks_of(marks, "waits-started")) == 1  # the task ran once, then resumed
    assert [line.split()[1] for line in marks_of(marks, "waits-resumed")] == ["1"]
    assert trigger_rows() == []  # the fired trigger is gone


def test_the_trigger_runner_starts_for_a_trigger_and_leaves_once_idle(
    start_method, make_settings, tmp_path, deferral_url
):
    """An idle triggerer holds no runner: one starts once a trigger waits, leaves once
    it has run none for [triggerer] runner_idle_timeout, and the next trigger that
    waits starts another."""
    settings, _, marks = set_up(
        start_method,
        make_settings,
        tmp_path,
        deferral_url,
        watchers=False,
        **{"triggerer.runner_idle_timeout": "1"},
    )
    log = settings.logging.base_log_folder / "triggerer.log"

    def started() -> list[int]:
        return [e["runner_pid"] for e in log_events(log) if e["event"] == "trigger runner started"]

    triggerer = start_triggerer(settings)
    try:
        # Each turn heartbeats the triggerer's row: two turns with nothing to run.
        wait_for(heartbeats_seen(3), "two turns of the triggerer")
        assert started() == []
        waiting = harness.trigger("waits_for_a_gate")
        opener: list[int] = []

        def open_the_gate_once_it_waits(_summary) -> None:
            if not opener and task_instance(waiting, "waits").state == TaskState.DEFERRED:
                opener.append(harness.trigger("opens_the_gate"))

        schedule_until(settings, None, lambda: harness.finished(waiting),
                       on_loop=open_the_gate_once_it_waits)  # fmt: skip
        (first,) = started()
        wait_for(lambda: "trigger runner idle; letting it go" in events_of(log),
                 "the idle runner to be let go")  # fmt: skip
        assert wait_for_gone(first)
        again = harness.trigger("waits_for_a_gate")  # its gate is open: it fires at once
        schedule_until(settings, {again}, lambda: harness.finished(again))
    finally:
        triggerer.stop(grace=5)

    assert [task_instance(run, "waits").state for run in (waiting, again)] == ["success"] * 2
    assert len(marks_of(marks, "waits-resumed")) == 2
    assert len(started()) == 2  # a second runner, after the first left


def heartbeats_seen(count: int):
    """A condition: the triggerer's job row has had ``count`` heartbeats (its
    registration's and one per turn) since the first call."""
    from sqlalchemy import select

    from spawnflow.bootstrap import orm
    from spawnflow.models.job import Job

    seen: set = set()

    def check() -> bool:
        with orm.session_scope(write=False) as session:
            query = select(Job.latest_heartbeat).where(Job.job_type == "triggerer")
            seen.update(session.scalars(query))
        return len(seen) >= count

    return check


def events_of(path) -> list[str]:
    return [e.get("event") for e in log_events(path)]


def test_a_trigger_that_does_not_fire_in_time_fails_the_try_saying_so(deferring):
    settings, _, _ = deferring
    run_id = harness.trigger("times_out")
    triggerer = start_triggerer(settings)
    try:
        schedule_until(settings, {run_id}, lambda: harness.finished(run_id))
    finally:
        triggerer.stop(grace=5)

    never = task_instance(run_id, "never")
    assert never.state == "failed"
    assert never.reason.startswith("the trigger did not fire within the deferral's timeout")
    assert never.next_method is None  # a retry would start from the beginning


def test_a_trigger_that_raises_fails_its_task_with_the_error(deferring):
    settings, _, _ = deferring
    run_id = harness.trigger("trigger_fails")
    triggerer = start_triggerer(settings)
    try:
        schedule_until(settings, {run_id}, lambda: harness.finished(run_id))
    finally:
        triggerer.stop(grace=5)

    broken = task_instance(run_id, "broken")
    assert (broken.state, broken.reason) == (
        "failed",
        "its trigger failed: RuntimeError: the trigger broke on purpose",
    )


def test_a_killed_triggerer_is_taken_over_and_the_task_resumes_once(deferring):
    settings, gates, marks = deferring
    run_id = harness.trigger("waits_for_a_gate")
    runner_log = settings.logging.base_log_folder / "trigger-runner.log"
    first = start_triggerer(settings)

    def runners_running_it() -> list[int]:
        return [
            e["pid"]
            for e in log_events(runner_log)
            if e.get("event") == "trigger started" and e["owner"].startswith("task")
        ]

    try:
        schedule_until(settings, {run_id}, lambda: bool(runners_running_it()))  # mid-trigger now
        (runner,) = runners_running_it()
        held_by = trigger_rows()[0].triggerer_id
        psutil.Process(first.pid).kill()  # its runner dies with it
        first.join(timeout=30)
        second = start_triggerer(settings)
        try:
            # Taken over once the first one's heartbeat is [triggerer] heartbeat_timeout old.
            wait_for(lambda: trigger_rows()[0].triggerer_id not in (None, held_by),
                     "the second triggerer claiming the trigger")  # fmt: skip
            (gates / "open").write_text("")
            schedule_until(settings, {run_id}, lambda: harness.finished(run_id))
        finally:
            second.stop(grace=5)
    finally:
        first.stop(grace=0)

    waits = task_instance(run_id, "waits")
    assert (waits.state, waits.try_number) == ("success", 1), waits.reason
    assert len(marks_of(marks, "waits-started")) == 1
    assert len(marks_of(marks, "waits-resumed")) == 1
    assert wait_for_gone(runner)  # the first runner died with its triggerer


def wait_for_gone(pid: int) -> bool:
    from tests.process.test_stop import gone

    return gone(pid)


def test_the_watchdog_names_a_trigger_that_blocks_the_loop(
    start_method, make_settings, tmp_path, deferral_url
):
    # The runner child sends its metrics to a StatsD "server": a socket of this test.
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    settings, _, _ = set_up(start_method, make_settings, tmp_path, deferral_url, **{
        "metrics.statsd_host": "127.0.0.1", "metrics.statsd_port": str(server.getsockname()[1]),
    })  # fmt: skip
    run_id = harness.trigger("blocks_the_loop")
    triggerer = start_triggerer(settings)
    try:
        schedule_until(settings, {run_id}, lambda: harness.finished(run_id))
    finally:
        triggerer.stop(grace=5)
    server.setblocking(False)
    sent = []
    with contextlib.suppress(BlockingIOError):  # every datagram was sent before the stop
        while True:
            sent.append(server.recv(4096).decode())
    server.close()
    assert any(line.startswith("spawnflow.triggers.blocked_main_thread:") for line in sent), sent

    assert task_instance(run_id, "sleepy").state == "success"
    log = settings.logging.base_log_folder / "trigger-runner.log"
    stalls = [e for e in log_events(log) if e.get("event") == "event loop blocked"]
    # A busy machine may add stalls nobody caused; the trigger's is among them, by name.
    culprit = "(SleepyTrigger) for task blocks_the_loop.sleepy"
    named = [s for s in stalls if any(culprit in name for name in s["culprits"])]
    assert named, f"the watchdog did not name the trigger: {stalls}"
    assert named[0]["level"] == "warning"
    assert named[0]["seconds"] >= 0.5


def test_task_state_survives_a_retry(deferring):
    settings, _, _ = deferring
    run_id = harness.trigger("remembers_across_tries")
    schedule_until(settings, {run_id}, lambda: harness.finished(run_id))

    counts = task_instance(run_id, "counts")
    assert (counts.state, counts.try_number) == ("success", 2), counts.reason
    assert _xcom(run_id, "counts") == [1, 2]


def test_a_deferrable_sensor_waits_on_the_triggerer(deferring):
    settings, gates, _ = deferring
    run_id = harness.trigger("senses_a_file")
    triggerer = start_triggerer(settings)

    def open_once_deferred(_summary) -> None:
        if task_instance(run_id, "sensor").state == TaskState.DEFERRED:
            (gates / "sensed").write_text("")

    try:
        schedule_until(settings, {run_id}, lambda: harness.finished(run_id),
                       on_loop=open_once_deferred)  # fmt: skip
    finally:
        triggerer.stop(grace=5)
    assert task_instance(run_id, "sensor").state == "success"


def test_an_async_tasks_state_accessors_never_block_its_loop_and_a_stall_is_logged(
    start_method, make_settings, tmp_path, deferral_url
):
    from tests.scheduler.test_runs import _log

    state = tmp_path / "state"
    settings, _, _ = set_up(start_method, make_settings, tmp_path, deferral_url, **{
        "state_store.backend": "deferral_helpers:ThreadRecordingBackend",
        "state_store.objectstorage_path": state.as_uri(),
    })  # fmt: skip
    run_id = harness.trigger("async_state")
    schedule_until(settings, {run_id}, lambda: harness.finished(run_id))

    ti = task_instance(run_id, "uses_state")
    assert ti.state == "success", ti.reason
    result = _xcom(run_id, "uses_state")
    assert result["value"] == {"v": 2}
    hooks = [line.split() for line in (state / "threads.txt").read_text().splitlines()]
    assert {hook for hook, _ in hooks} == {"serialize", "store", "load", "deserialize", "purge"}
    assert str(result["loop_thread"]) not in {thread for _, thread in hooks}
    assert len(list(state.rglob("k-*.json"))) == 1  # the replaced value's object is gone
    stalls = [e for e in log_events(_log(settings, run_id, "uses_state", 1))
              if e.get("event") == "event loop blocked"]  # fmt: skip
    # A busy machine may add stalls nobody caused (the process was not given the CPU):
    # the one the task caused is among them, by name.
    named = [s for s in stalls if s["culprits"] == ["task uses_state (uses_state)"]]
    assert named, f"the task's watchdog did not name the task: {stalls}"
    assert named[0]["level"] == "warning"
    assert named[0]["seconds"] >= 0.5
