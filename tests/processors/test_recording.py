"""How a supervisor records a try: a database that refuses a heartbeat is not fatal."""

from __future__ import annotations

import datetime as dt
from contextlib import contextmanager

from sqlalchemy import exc

from spawnflow.comms.tasks import Workload
from spawnflow.processors.worker import recording


def workload() -> Workload:
    now = dt.datetime.now(dt.UTC)
    return Workload(
        ti_id=1, dag_id="d", run_id="r", task_id="t", try_number=1, dag_file="f.py",
        dags_folder=".", logical_date=now, data_interval_start=now, data_interval_end=now,
        conf={}, params={}, execution_timeout=None, retry_delay=0, log_file="a.log",
    )  # fmt: skip


def test_a_refused_heartbeat_is_retried_after_a_doubling_backoff(monkeypatch, make_settings):
    make_settings()  # the backoff is capped by [scheduler] task_heartbeat_timeout
    attempts: list[float] = []

    @contextmanager
    def unreachable(*args, **kwargs):
        attempts.append(clock[0])
        raise exc.OperationalError("UPDATE task_instance", {}, Exception("server closed"))
        yield  # pragma: no cover - never reached

    clock = [100.0]
    monkeypatch.setattr(recording.orm, "session_scope", unreachable)
    monkeypatch.setattr(recording.time, "monotonic", lambda: clock[0])
    recorder = recording.DatabaseRecorder(workload())

    for _ in range(40):  # 40 beats of a quarter second: ten seconds of outage
        assert recorder.heartbeat() is True  # not fatal, not "changed from outside"
        clock[0] += 0.25

    # Tried at once, then 1, 2, 4 s later (8 s would be past the ten seconds).
    assert [round(t - 100.0, 2) for t in attempts] == [0.0, 1.0, 3.0, 7.0]


def test_a_heartbeat_that_works_again_resets_the_backoff(monkeypatch, make_settings):
    make_settings()
    calls: list[str] = []
    healthy = [False]

    class Result(recording.CursorResult):
        def __init__(self):  # a stand-in for an UPDATE's result: one row
            pass

        rowcount = 1

    class Session:
        def execute(self, statement):
            return Result()

    @contextmanager
    def flaky(*args, **kwargs):
        calls.append("try")
        if not healthy[0]:
            raise exc.OperationalError("UPDATE", {}, Exception("gone"))
        yield Session()

    clock = [0.0]
    monkeypatch.setattr(recording.orm, "session_scope", flaky)
    monkeypatch.setattr(recording.time, "monotonic", lambda: clock[0])
    recorder = recording.DatabaseRecorder(workload())
    assert recorder.heartbeat() is True
    healthy[0] = True
    clock[0] = 1.0
    assert recorder.heartbeat() is True
    clock[0] = 1.1
    assert recorder.heartbeat() is True  # no backoff left: it tried again at once
    assert calls == ["try", "try", "try"]
