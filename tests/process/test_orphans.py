"""No orphan survives its supervisor (law 7), however the supervisor ends."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from spawnflow.bootstrap import lifecycle
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.launcher import ChildSpec, launch
from tests.process.test_stop import gone, running

pytestmark = pytest.mark.process
TARGETS = "tests.fixtures.targets"
POSIX = platforms.current().process_groups


def start_supervisor(method: str, **kwargs) -> tuple:
    spec = ChildSpec("test-supervisor", f"{TARGETS}:supervise", {"method": method, **kwargs})
    supervisor = launch(spec, method=method)
    supervisor.wait_ready()
    grandchild = supervisor.channel.recv(timeout=120).values["grandchild"]
    return supervisor, grandchild


def test_grandchildren_stop_when_their_supervisor_is_killed(start_method, make_settings):
    make_settings(**{"core.stop_grace_period": "5"})
    supervisor, grandchild = start_supervisor(start_method, grandchild="wait_quietly")

    psutil.Process(supervisor.pid).kill()

    assert supervisor.join(timeout=60).describe(meaning=False) in (
        "killed by SIGKILL",  # POSIX
        "exited with code 1",  # TerminateProcess on Windows
    )
    assert gone(grandchild, timeout=60)


@pytest.mark.skipif(not POSIX, reason="drives the macOS path, which needs fork and POSIX")
def test_grandchildren_see_their_parent_die_through_the_control_pipe(make_settings):
    # macOS has no parent-death signal: a child watches its control pipe for the EOF
    # that its parent's death causes. A fork grandchild inherits the supervisor's
    # choice of platform, so this drives exactly that path here.
    make_settings(**{"core.stop_grace_period": "5"})
    supervisor, grandchild = start_supervisor("fork", grandchild="wait_quietly", platform="darwin")

    psutil.Process(supervisor.pid).kill()

    supervisor.join(timeout=60)
    assert gone(grandchild, timeout=60)


def test_a_killed_supervisor_closes_its_channel_even_with_a_fork_grandchild(
    start_method, make_settings
):
    make_settings(**{"core.stop_grace_period": "5"})
    # A fork grandchild inherits every descriptor of the supervisor, its end of the
    # channel to us included; it ignores the stop its parent's death sends it.
    spec = ChildSpec(
        "test-supervisor",
        f"{TARGETS}:supervise",
        {"method": "fork", "grandchild": "ignore_stop_signals"},
    )
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


@pytest.mark.skipif(not POSIX, reason="sends SIGTERM, which Windows does not have")
def test_a_second_stop_request_makes_the_childs_own_stop_cold(
    start_method, make_settings, tmp_path
):
    # The child would give its grandchild 60 s; a second request must cut that short.
    make_settings(**{"core.stop_grace_period": "60"})
    marker = tmp_path / "sigterm"
    supervisor, grandchild = start_supervisor(
        start_method, grandchild="note_sigterm_and_stay", kwargs={"marker": str(marker)}
    )

    os.kill(supervisor.pid, signal.SIGTERM)  # warm: the child starts stopping its grandchild
    assert wait_for(marker.exists), "the grandchild never got its warm stop"
    os.kill(supervisor.pid, signal.SIGTERM)  # now

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
