"""The local executor's workers: booted, replaced, given up on when they cannot boot."""

from __future__ import annotations

import pytest

from spawnflow.bootstrap import forkservers, logs
from spawnflow.bootstrap.child import ChildBootError
from spawnflow.executors import local

pytestmark = pytest.mark.process


def test_workers_that_cannot_boot_are_retried_then_reported_not_looped_on(
    start_method, make_settings, monkeypatch, caplog
):
    settings = make_settings(**{"core.mp_start_method": start_method,
                                "executor.parallelism": "1"})  # fmt: skip
    # The spec names its target by import string: the child imports it, and fails.
    monkeypatch.setattr(local, "TARGET", "tests.fixtures.broken_import:run")
    executor = local.LocalExecutor(settings)

    with (
        caplog.at_level("WARNING"),
        pytest.raises(ChildBootError, match="could not boot \\(target import\\)"),
    ):
        executor.start()

    assert executor.boot_failures == local.MAX_BOOT_FAILURES
    assert executor.workers == []
    # Each replacement waited twice as long as the one before; the last was not made.
    failures = [logs.event_of(r) for r in caplog.records
                if r.getMessage() == "worker could not boot"]  # fmt: skip
    assert [f["retry_seconds"] for f in failures] == [1.0, 2.0, 4.0]


def test_a_worker_that_ends_is_lost_and_the_next_task_starts_a_fresh_one(
    start_method, make_settings, monkeypatch
):
    import psutil

    from spawnflow.executors import TaskEnded

    executor = _executor(start_method, make_settings, monkeypatch, "chatty_worker",
                         parallelism="1")  # fmt: skip
    executor.start()
    try:
        first = executor.workers[0]
        psutil.Process(first.pid).kill()
        assert executor.watch.until(lambda: executor.lost_workers == 1, timeout=120)
        assert (executor.workers, executor.events()) == ([], [])  # it ran nothing: nothing lost
        assert executor.free_slots() == 1  # nothing waits for it: no worker is started yet

        executor.queue(_workload(5))
        assert _ends(executor) == [TaskEnded(5, "success")]
        assert [w.pid for w in executor.workers] != [first.pid]
    finally:
        executor.end(grace=5)


def test_workers_start_as_tasks_need_them_up_to_parallelism(
    start_method, make_settings, monkeypatch, tmp_path
):
    """One worker starts with the executor; each task that finds none idle starts
    another, up to [executor] parallelism; tasks beyond wait for a slot."""
    from spawnflow.executors import TaskEnded

    executor = _executor(start_method, make_settings, monkeypatch, "hold_until_gate",
                         parallelism="3", worker_idle_timeout="0")  # fmt: skip
    executor.start()
    gate = tmp_path / "gate"
    try:
        assert len(executor.workers) == 1
        for ti_id in (1, 2, 3):
            executor.queue(_workload(ti_id, dag_file=str(gate)))
        assert (executor.free_slots(), executor.holds()) == (0, {1, 2, 3})
        assert executor.watch.until(lambda: executor.running() == 3, timeout=120)
        assert len(executor.workers) == 3

        gate.touch()
        ended = _ends(executor, 3)
        assert sorted(e.ti_id for e in ended) == [1, 2, 3]
        assert all(isinstance(e, TaskEnded) and e.state == "success" for e in ended)
        assert (len(executor.workers), executor.free_slots()) == (3, 3)  # 0: they stay
    finally:
        executor.end(grace=5)


def test_an_idle_worker_leaves_after_the_idle_timeout_and_nothing_is_lost(
    start_method, make_settings, monkeypatch, tmp_path, caplog
):
    from spawnflow.executors import TaskEnded

    executor = _executor(start_method, make_settings, monkeypatch, "hold_until_gate",
                         parallelism="2", worker_idle_timeout="0.2",
                         heartbeat_interval="0.1")  # fmt: skip
    gate = tmp_path / "gate"
    with caplog.at_level("WARNING"):
        executor.start()
        try:
            first = executor.workers[0].pid
            assert executor.watch.until(lambda: not executor.workers, timeout=120)
            assert (executor.lost_workers, executor.events()) == (0, [])

            gate.touch()
            executor.queue(_workload(9, dag_file=str(gate)))
            assert _ends(executor) == [TaskEnded(9, "success")]
            assert [w.pid for w in executor.workers] != [first]
        finally:
            executor.end(grace=5)
    assert executor.lost_workers == 0
    assert not [r for r in caplog.records if r.name.startswith("spawnflow.executor")]


def test_a_stop_hands_back_the_tasks_that_waited_for_a_worker(
    start_method, make_settings, monkeypatch, tmp_path
):
    executor = _executor(start_method, make_settings, monkeypatch, "hold_until_gate",
                         parallelism="2")  # fmt: skip
    executor.start()
    gate = tmp_path / "gate"
    waiting = _workload(2, dag_file=str(gate))
    try:
        executor.queue(_workload(1, dag_file=str(gate)))  # to the worker that is ready
        executor.queue(waiting)  # a second worker boots for it
        executor.request_stop()
        assert executor.running() == 1  # the scheduler waits for the first only
    finally:
        gate.touch()
        cut_short = executor.end(grace=30)
    assert waiting in cut_short
    assert executor.holds() == set()


def test_a_task_end_counts_only_under_the_id_of_the_request_that_started_it(
    start_method, make_settings, monkeypatch, caplog
):
    import datetime as dt

    from spawnflow.comms.tasks import Workload
    from spawnflow.executors import TaskEnded

    settings = make_settings(**{"core.mp_start_method": start_method,
                                "executor.parallelism": "1"})  # fmt: skip
    monkeypatch.setattr(local, "TARGET", "tests.fixtures.targets:answer_a_wrong_id_first")
    executor = local.LocalExecutor(settings)
    executor.start()
    now = dt.datetime.now(dt.UTC)
    workload = Workload(
        ti_id=7, dag_id="d", run_id="r", task_id="t", try_number=1, dag_file="/d.py",
        dags_folder=None, logical_date=now, data_interval_start=None, data_interval_end=None,
        conf={}, params={}, execution_timeout=None, retry_delay=0.0, log_file="/dev/null",
    )  # fmt: skip
    ended = []
    try:
        with caplog.at_level("WARNING"):
            executor.queue(workload)
            assert executor.watch.until(lambda: bool(ended.extend(executor.events()) or ended),
                                        timeout=120)  # fmt: skip
    finally:
        executor.end(grace=5)
    assert ended == [TaskEnded(7, "success")]  # the answer under its own id, only
    assert any(r.getMessage() == "worker answered a request it was not running"
               for r in caplog.records)  # fmt: skip


def test_the_schedulers_wait_ends_on_a_task_end_not_on_a_worker_saying_it_is_alive(
    start_method, make_settings, monkeypatch
):
    """Busy workers say they are alive several times per task; the scheduler loops
    again when a task ends (or a worker is lost), not on each of those."""
    import datetime as dt
    import time

    from spawnflow.comms.tasks import WorkerAlive, Workload
    from spawnflow.executors import TaskEnded

    settings = make_settings(**{"core.mp_start_method": start_method,
                                "executor.parallelism": "1"})  # fmt: skip
    monkeypatch.setattr(local, "TARGET", "tests.fixtures.targets:chatty_worker")
    executor = local.LocalExecutor(settings)
    pings = []
    on_message = executor._on_message

    def counting(watched, message):
        pings.extend([1] if isinstance(message, WorkerAlive) else [])
        on_message(watched, message)

    monkeypatch.setattr(executor, "_on_message", counting)
    executor.start()
    try:
        assert executor.watch.until(lambda: len(pings) >= 3, timeout=120)
        before, started = len(pings), time.monotonic()
        executor.wait(1.5)
        assert time.monotonic() - started >= 1.5  # it waited the whole time...
        assert len(pings) > before  # ...though the worker said it was alive meanwhile
        assert executor.events() == []

        now = dt.datetime.now(dt.UTC)
        executor.queue(Workload(
            ti_id=7, dag_id="d", run_id="r", task_id="t", try_number=1, dag_file="/d.py",
            dags_folder=None, logical_date=now, data_interval_start=None,
            data_interval_end=None, conf={}, params={}, execution_timeout=None,
            retry_delay=0.0, log_file="/dev/null",
        ))  # fmt: skip
        started = time.monotonic()
        executor.wait(300)
        assert time.monotonic() - started < 300  # the task's end ended the wait
        assert executor.events() == [TaskEnded(7, "success")]
    finally:
        executor.end(grace=5)


def test_workers_fork_their_tasks_from_one_server_the_executor_started_before_them(
    start_method, make_settings, monkeypatch
):
    """Under forkserver the executor starts the server that forks every worker's tasks
    before it launches a worker (its interpreter and preload, paid at the first task,
    made a silent worker look hung on a busy machine), and no worker starts its own."""
    import psutil

    from spawnflow.comms.tasks import WorkerAlive

    settings = make_settings(**{"core.mp_start_method": start_method,
                                "executor.parallelism": "1"})  # fmt: skip
    executor = local.LocalExecutor(settings)
    said_alive = []
    on_message = executor._on_message

    def noting_alive(watched, message):
        said_alive.append(isinstance(message, WorkerAlive))
        on_message(watched, message)

    def servers(process: psutil.Process) -> list[int]:
        return [
            c.pid for c in process.children()
            if "multiprocessing.forkserver" in " ".join(c.cmdline())
        ]  # fmt: skip

    monkeypatch.setattr(executor, "_on_message", noting_alive)
    executor.start()
    try:
        assert executor.watch.until(lambda: any(said_alive), timeout=120)
        assert servers(psutil.Process(executor.workers[0].pid)) == []
        if start_method == "forkserver":
            # Ours (this process may have started it for an earlier test), running.
            ours = forkservers.server_for("task")._forkserver_pid
            assert ours in servers(psutil.Process())
            assert [ref.kind for ref in forkservers.handed_down(shared=True)] == ["user"]
    finally:
        executor.end(grace=5)


def test_a_warm_stop_does_not_ask_a_worker_already_stopped_for_hanging_twice(
    start_method, make_settings, monkeypatch, tmp_path
):
    """A worker found hung was asked to stop warm; the executor's own warm stop must not
    ask it again, since a second request means "now" to a worker."""
    from spawnflow.executors import WorkerLost

    settings = make_settings(**{
        "core.mp_start_method": start_method, "core.stop_grace_period": "600",
        "executor.parallelism": "1", "executor.heartbeat_interval": "0.1",
        "scheduler.task_heartbeat_timeout": "1",
    })  # fmt: skip
    monkeypatch.setattr(local, "TARGET", "tests.fixtures.targets:silent_until_stopped")
    executor = local.LocalExecutor(settings)
    executor.start()
    gate = tmp_path / "gate"
    try:
        executor.queue(_workload(7, dag_file=str(gate)))
        assert executor.watch.until(lambda: bool(executor.hung), timeout=120)
        # Once the worker took that request (two signals sent together may merge).
        asked = tmp_path / "gate.asked"
        assert executor.watch.until(asked.exists, timeout=120, poll=0.05)
        executor.request_stop()
        gate.touch()  # only now may the worker look whether it was asked twice
        lost = _ends(executor)
    finally:
        executor.end(grace=5)
    assert [type(event) for event in lost] == [WorkerLost]
    assert (tmp_path / "gate.stop").read_text() == "warm"


def _executor(start_method, make_settings, monkeypatch, target: str, **executor_options):
    """An executor (not started) whose workers run ``tests.fixtures.targets:<target>``."""
    options = {f"executor.{name}": value for name, value in executor_options.items()}
    settings = make_settings(**{"core.mp_start_method": start_method, **options})
    monkeypatch.setattr(local, "TARGET", f"tests.fixtures.targets:{target}")
    return local.LocalExecutor(settings)


def _ends(executor: local.LocalExecutor, count: int = 1) -> list:
    """The next ``count`` events of ``executor``, serviced until they came (2 min at most)."""
    ended: list = []
    assert executor.watch.until(
        lambda: len(ended.extend(executor.events()) or ended) >= count, timeout=120
    )
    return ended


def _workload(ti_id: int, dag_file: str = "/d.py"):
    import datetime as dt

    from spawnflow.comms.tasks import Workload

    return Workload(
        ti_id=ti_id, dag_id="d", run_id="r", task_id="t", try_number=1, dag_file=dag_file,
        dags_folder=None, logical_date=dt.datetime.now(dt.UTC), data_interval_start=None,
        data_interval_end=None, conf={}, params={}, execution_timeout=None, retry_delay=0.0,
        log_file="/dev/null",
    )  # fmt: skip


@pytest.mark.parametrize("taken", [False, True], ids=["loss-not-taken", "loss-taken"])
def test_a_worker_the_stop_ended_first_hands_its_task_back_once(
    start_method, make_settings, monkeypatch, taken
):
    """A Windows console's Ctrl-C reaches the workers too: one can be gone before the
    scheduler acts on its own. The task it ran is cut short by the stop (queued again),
    unless the scheduler already took the loss: never both, never neither."""
    from spawnflow.executors import WorkerLost

    settings = make_settings(**{"core.mp_start_method": start_method,
                                "executor.parallelism": "1"})  # fmt: skip
    monkeypatch.setattr(local, "TARGET", "tests.fixtures.targets:exit_on_a_task")
    executor = local.LocalExecutor(settings)
    executor.start()
    workload = _workload(11)
    try:
        executor.queue(workload)  # to the worker that is ready, which ends on it
        executor.request_stop()
        assert executor.watch.until(lambda: executor.running() == 0, timeout=120)
        lost = executor.events() if taken else []
    finally:
        cut_short = executor.end(grace=5)
    if taken:
        assert ([type(e) for e in lost], cut_short) == ([WorkerLost], [])
    else:
        assert (cut_short, executor.events()) == ([workload], [])
