"""The watch loop: boots, messages, output, exits, deadlines and timers, under each method."""

from __future__ import annotations

import pytest

from spawnflow.bootstrap.child import ChildBootError
from spawnflow.bootstrap.launcher import ChildSpec, launch
from spawnflow.bootstrap.watch import Watch
from tests.fixtures.messages import Report  # noqa: F401 - registers the message for decoding

pytestmark = pytest.mark.process
TARGETS = "tests.fixtures.targets"


def test_a_boot_past_its_budget_is_a_boot_failure_naming_role_method_and_budget(
    start_method, make_settings
):
    make_settings()
    failures: list[ChildBootError] = []
    watch = Watch(boot_timeout=0.5)
    child = launch(ChildSpec("slow-child", "tests.fixtures.slow_import:wait_quietly"),
                   method=start_method)  # fmt: skip
    watch.add(child, on_boot_failure=lambda watched, error: failures.append(error))

    assert watch.until(lambda: bool(failures), timeout=120)

    message = str(failures[0])
    assert f"'slow-child' (pid {child.pid}, {start_method}) was still booting" in message
    assert "past its boot budget (0.5 s, [core] child_boot_timeout)" in message
    assert child.exit_status is not None  # stopped: no child outlives its failed boot
    assert watch.watched == []


def test_what_a_child_sent_and_printed_before_it_exited_comes_before_its_exit(
    start_method, make_settings
):
    make_settings()
    seen: list[str] = []
    watch = Watch()
    child = launch(ChildSpec("test-child", f"{TARGETS}:send_then_exit", {"count": 50},
                             capture_output=True), method=start_method)  # fmt: skip
    watch.add(
        child,
        on_ready=lambda watched: seen.append("ready"),
        on_message=lambda watched, message: seen.append(f"message {message.values['n']}"),
        on_output=lambda watched, stream, data: seen.append(f"{stream} {data.decode().strip()}"),
        on_exit=lambda watched, status: seen.append(f"exit {status.exitcode}"),
    )  # fmt: skip

    assert watch.until(lambda: bool(seen) and seen[-1].startswith("exit"), timeout=120)

    assert seen[0] == "ready"
    assert [s for s in seen if s.startswith("message")] == [f"message {n}" for n in range(50)]
    assert "stdout last words" in seen
    assert seen[-1] == "exit 0"


def test_a_deadline_set_at_ready_stops_the_child_when_nobody_handles_it(
    start_method, make_settings
):
    make_settings()
    ended = []
    watch = Watch()
    child = launch(ChildSpec("test-child", f"{TARGETS}:wait_quietly"), method=start_method)
    watch.add(child, on_ready=lambda watched: watched.set_deadline(0.2),
              on_exit=lambda watched, status: ended.append(status))  # fmt: skip

    assert watch.until(lambda: bool(ended), timeout=120)

    assert ended[0].exitcode == 0  # stopped warm: the child waits to be asked


def test_timers_run_between_turns(make_settings):
    make_settings()
    ticks: list[int] = []
    watch = Watch()
    watch.every(0.01, lambda: ticks.append(1))

    assert watch.until(lambda: len(ticks) >= 3, timeout=60)


def test_a_stop_kills_a_child_that_ignores_it_after_the_grace_while_timers_go_on(
    start_method, make_settings
):
    make_settings()
    ended, ticks = [], []
    watch = Watch()
    child = launch(ChildSpec("test-child", f"{TARGETS}:ignore_stop_signals"), method=start_method)
    # Stopped once it says it ignores stop signals (its Report), not at Ready.
    watched = watch.add(child, on_message=lambda watched, _: watch.stop(watched, grace=1.0),
                        on_exit=lambda watched, status: ended.append(status))  # fmt: skip
    watch.every(0.05, lambda: ticks.append(watched.stopping and not ended))

    assert watch.until(lambda: bool(ended), timeout=120)

    assert ended[0].cold  # it ignored the warm stop: killed once the grace period passed
    assert any(ticks)  # the loop went on while it waited for the grace period to pass


def test_a_child_stopped_while_it_boots_exits_and_is_no_boot_failure(start_method, make_settings):
    make_settings()
    ended, failures = [], []
    watch = Watch()
    child = launch(ChildSpec("slow-child", "tests.fixtures.slow_import:wait_quietly"),
                   method=start_method)  # fmt: skip
    watched = watch.add(child, on_exit=lambda watched, status: ended.append(status),
                        on_boot_failure=lambda watched, error: failures.append(error))  # fmt: skip
    watch.stop(watched, grace=5.0)  # at once: it is still importing its target

    assert watch.until(lambda: bool(ended or failures), timeout=120)

    assert failures == []
    assert len(ended) == 1
    assert child.exit_status is ended[0]


def test_a_waker_ends_a_wait_on_children_from_another_thread(start_method, make_settings):
    """The Celery worker's threads hand workloads to the thread that drives the local
    executor: waking it ends its wait at once, whatever its children are doing."""
    import threading

    make_settings()
    watch = Watch()
    child = launch(ChildSpec("test-child", f"{TARGETS}:wait_quietly"), method=start_method)
    said: list = []
    watch.add(child, on_message=lambda watched, message: said.append(message))
    # Its one message read (under load it can come after Ready): from now on it is quiet.
    assert watch.until(lambda: said, timeout=120)
    waker = watch.waker()
    try:
        thread = threading.Thread(target=waker.wake)
        thread.start()
        watch.wait(timeout=None)  # only the wake can end this one: the child waits quietly
        thread.join()
        assert watch.woken
        watch.wait(timeout=0)  # drained: the next wait is not woken again
        assert not watch.woken
        for _ in range(100_000):  # one byte at most is pending: never a full pipe
            waker.wake()
        watch.wait(timeout=None)
        assert watch.woken
    finally:
        watch.stop(watch.watched[0], grace=5)
        assert watch.until(lambda: not watch.watched, timeout=120)
