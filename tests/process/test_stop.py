"""Stopping process trees (law 7) under each start method, and the Windows code path."""

from __future__ import annotations

import time

import psutil
import pytest

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.launcher import ChildSpec, launch
from tests.fixtures.messages import Go

pytestmark = pytest.mark.process
TARGETS = "tests.fixtures.targets"
POSIX = platforms.current().process_groups


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone(pid: int, timeout: float = 30.0) -> bool:
    """Whether ``pid`` stops running within ``timeout`` (a SIGKILL lands asynchronously)."""
    deadline = time.monotonic() + timeout
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_stopping_a_child_with_a_grandchild_leaves_neither_running(start_method, make_settings):
    make_settings()
    spec = ChildSpec(
        "test-parent",
        f"{TARGETS}:supervise",
        {"grandchild": "wait_quietly", "method": start_method},
    )
    child = launch(spec, method=start_method)
    child.wait_ready()
    grandchild = child.channel.recv(timeout=60).values["grandchild"]
    assert running(child.pid)
    assert running(grandchild)

    status = child.stop(grace=30)

    assert not status.cold, status
    assert status.describe() == "exited with code 0 (finished)"
    assert gone(child.pid)
    assert gone(grandchild)


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period(start_method, make_settings):
    make_settings()
    child = launch(
        ChildSpec("test-stubborn", f"{TARGETS}:ignore_stop_signals"), method=start_method
    )
    child.wait_ready()
    child.channel.recv(timeout=60)  # SIGTERM is ignored from here on

    status = child.stop(grace=0.5)

    assert status.cold
    if POSIX:  # Windows reports a TerminateProcess exit code, not a signal
        assert status.describe() == "killed by SIGKILL"
    assert gone(child.pid)


def test_a_grandchild_that_ignores_sigterm_dies_with_its_tree(start_method, make_settings):
    make_settings(**{"core.stop_grace_period": "0.5"})  # the child's grace for its own children
    spec = ChildSpec(
        "test-parent",
        f"{TARGETS}:supervise",
        {"grandchild": "ignore_stop_signals", "method": start_method},
    )
    child = launch(spec, method=start_method)
    child.wait_ready()
    grandchild = child.channel.recv(timeout=60).values["grandchild"]

    status = child.stop(grace=30)

    assert not status.cold  # the child stopped warm after killing its grandchild cold
    assert gone(grandchild)
    assert gone(child.pid)


@pytest.mark.skipif(not POSIX, reason="a POSIX process group; Windows would need a job object")
def test_what_a_child_leaves_in_its_process_group_is_killed_when_it_is_reaped(
    start_method, make_settings
):
    make_settings()
    child = launch(ChildSpec("test-shell", f"{TARGETS}:leave_background_job"), method=start_method)
    child.wait_ready()
    orphan = child.channel.recv(timeout=60).values["orphan"]
    assert running(orphan)
    # The shell has exited: the orphan is no longer a descendant of the child.
    assert orphan not in {p.pid for p in psutil.Process(child.pid).children(recursive=True)}

    child.channel.send(Go(id=child.channel.next_id()))
    status = child.join(timeout=60)

    assert status.exitcode == 0
    assert gone(orphan)


def test_windows_path_stops_warm_through_the_control_pipe(make_settings, monkeypatch):
    # Windows has only spawn and no SIGTERM between processes; the launcher gives
    # each child a control pipe instead. Driven here through the platform module.
    monkeypatch.setattr(platforms, "_current", platforms.WINDOWS)
    make_settings(**{"core.mp_start_method": "spawn"})
    child = launch(ChildSpec("test-child", "spawnflow.processors.probe:wait_for_stop"))
    child.wait_ready()

    status = child.stop(grace=30)

    assert (status.cold, status.exitcode) == (False, 0)


def test_windows_path_kills_a_tree_that_ignores_the_warm_stop(make_settings, monkeypatch):
    monkeypatch.setattr(platforms, "_current", platforms.WINDOWS)
    make_settings(**{"core.mp_start_method": "spawn"})
    child = launch(ChildSpec("test-stubborn", f"{TARGETS}:ignore_stop_signals"))
    child.wait_ready()
    child.channel.recv(timeout=60)

    status = child.stop(grace=0.5)

    assert status.cold
    assert gone(child.pid)


def test_windows_path_stops_a_child_blocked_in_a_read_warm(make_settings, monkeypatch):
    # The control pipe's watcher must break the main thread out of a blocking call,
    # not just flag a signal that only runs when the main thread wakes on its own.
    monkeypatch.setattr(platforms, "_current", platforms.WINDOWS)
    make_settings(**{"core.mp_start_method": "spawn"})
    child = launch(ChildSpec("test-echo", f"{TARGETS}:echo_server"))
    child.wait_ready()

    status = child.stop(grace=30)

    assert (status.cold, status.exitcode) == (False, 0)
