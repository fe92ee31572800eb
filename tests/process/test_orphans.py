"""No orphan survives its supervisor (law 7), however the supervisor ends."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from spawnflow.bootstrap import lifecycle
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.launcher import ChildSpec, launch
from tests.oskit import KILLED, POSIX
from tests.process.test_stop import gone, running, supervisor_spec

pytestmark = pytest.mark.process
TARGETS = "tests.fixtures.targets"


def start_supervisor(method: str, **kwargs) -> tuple:
    spec = supervisor_spec({"method": method, **kwargs})
    supervisor = launch(spec, method=method)
    supervisor.wait_ready()
    grandchild = supervisor.channel.recv(timeout=120).values["grandchild"]
    return supervisor, grandchild


def test_grandchildren_stop_when_their_supervisor_is_killed(start_method, make_settings):
    make_settings(**{"core.stop_grace_period": "5"})
    supervisor, grandchild = start_supervisor(start_method, grandchild="wait_quietly")

    psutil.Process(supervisor.pid).kill()

    assert supervisor.join(timeout=60).describe(meaning=False) == KILLED
    # Linux: the kernel's parent-death signal. macOS and Windows: the grandchild's
    # control pipe reports the EOF of its parent's death (a signal on macOS, a thread
    # on Windows).
    assert gone(grandchild, timeout=60)


def test_user_code_whose_parent_is_killed_dies_at_once_with_what_it_started(
    start_method, make_settings
):
    # Grace 60: an orphan that only stopped warm would still be there when we look.
    make_settings(**{"core.stop_grace_period": "60"})
    spec = supervisor_spec({
        "method": start_method, "grandchild": "start_a_sleeper", "kill_with_parent": True,
    })  # fmt: skip
    supervisor = launch(spec, method=start_method)
    supervisor.wait_ready()
    report = supervisor.channel.recv(timeout=120).values
    grandchild, sleeper = report["grandchild"], report["sleeper"]
    try:
        psutil.Process(supervisor.pid).kill()

        supervisor.join(timeout=60)
        assert gone(grandchild, timeout=30), "user code outlived its killed parent"
        if platforms.current().parent_death_signal:
            # Linux: the kernel killed the grandchild alone; whoever launched the lost
            # parent kills the group it leaves (the executor does this for a dead worker's
            # task).
            platforms.current().kill_orphaned_group(grandchild, 0.0)
        assert gone(sleeper, timeout=30), "what user code started outlived its killed parent"
    finally:
        kill_if_running(grandchild, sleeper)


def kill_if_running(*pids: int) -> None:
    """Clean up after a failure: processes a test expected to be gone."""
    for pid in pids:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


@pytest.mark.skipif("fork" not in platforms.current().start_methods, reason="no fork here")
def test_a_killed_supervisor_closes_its_channel_even_with_a_fork_grandchild(
    start_method, make_settings
):
    make_settings(**{"core.stop_grace_period": "5"})
    # A fork grandchild inherits every descriptor of the supervisor, its end of the
    # channel to us included; it ignores the stop its parent's death sends it.
    spec = supervisor_spec({"method": "fork", "grandchild": "ignore_stop_signals"})
    supervisor = launch(spec, method=start_method)
    supervisor.wait_ready()
    grandchild = supervisor.channel.recv(timeout=120).values["grandchild"]
    try:
        psutil.Process(supervisor.pid).kill()
        with pytest.raises(EOFError):
            supervisor.channel.recv(timeout=60)
    finally:
        supervisor.join(timeout=60)
        if running(grandchild):  # it ignores the stop it was sent: ours to clean up
            psutil.Process(grandchild).kill()


def test_a_second_stop_request_makes_the_childs_own_stop_cold(
    start_method, make_settings, tmp_path
):
    # The child would give its grandchild 60 s; a second request must cut that short.
    make_settings(**{"core.stop_grace_period": "60"})
    marker = tmp_path / "sigterm"
    supervisor, grandchild = start_supervisor(
        start_method, grandchild="note_sigterm_and_stay", kwargs={"marker": str(marker)}
    )

    supervisor.request_warm_stop()  # warm: the child starts stopping its grandchild
    assert wait_for(marker.exists), "the grandchild never got its warm stop"
    supervisor.request_warm_stop()  # now

    status = supervisor.join(timeout=30)
    assert status is not None, "the second request did not cut the child's stop short"
    assert status.exitcode == 0
    assert gone(grandchild)


def test_a_fork_child_starts_with_fresh_stop_state(start_method, make_settings, monkeypatch):
    make_settings()
    monkeypatch.setattr(lifecycle, "_deferred", True)
    stopping = lifecycle.stop_requested.__class__()
    stopping.set()
    monkeypatch.setattr(lifecycle, "stop_requested", stopping)

    with launch(
        ChildSpec("test-child", f"{TARGETS}:report_lifecycle"), method=start_method
    ) as child:
        child.wait_ready()
        report = child.channel.recv(timeout=60).values
        child.join(timeout=60)

    assert report == {"deferred": False, "stop_requested": False}


@pytest.mark.skipif(not POSIX, reason="process groups are POSIX")
def test_a_fork_child_leads_its_own_group_as_soon_as_launch_returns(make_settings):
    # Before the child's own setpgid a terminal's Ctrl-C would still reach it.
    make_settings()
    child = launch(ChildSpec("test-child", f"{TARGETS}:wait_quietly"), method="fork")
    try:
        assert os.getpgid(child.pid) == child.pid
    finally:
        child.stop(grace=10)


def wait_for(condition, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
