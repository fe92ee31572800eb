"""Stopping process trees (law 7) under each start method, and the Windows code path."""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.child import stop_many
from spawnflow.bootstrap.launcher import ChildSpec, launch
from tests.fixtures.messages import Echo, Echoed, Go
from tests.oskit import simulation

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


def supervisor_spec(kwargs: dict) -> ChildSpec:
    """A child that launches a grandchild, as spawnflow's components do. Like theirs, its
    warm stop is for it alone: its process group holds its forkserver, which must outlive
    the stop of its own children (a forkserver that dies makes them look exited)."""
    return ChildSpec("test-supervisor", f"{TARGETS}:supervise", kwargs, warm_stop_group=False)


def test_stopping_a_child_with_a_grandchild_leaves_neither_running(start_method, make_settings):
    make_settings()
    spec = supervisor_spec({"grandchild": "wait_quietly", "method": start_method})
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
    assert status.describe() == ("killed by SIGKILL" if POSIX else
                                 "killed after its grace period (exit code 15)")  # fmt: skip
    assert gone(child.pid)


def test_a_grandchild_that_ignores_sigterm_dies_with_its_tree(start_method, make_settings):
    make_settings(**{"core.stop_grace_period": "0.5"})  # the child's grace for its own children
    spec = supervisor_spec({"grandchild": "ignore_stop_signals", "method": start_method})
    child = launch(spec, method=start_method)
    child.wait_ready()
    grandchild = child.channel.recv(timeout=60).values["grandchild"]

    status = child.stop(grace=30)

    assert not status.cold  # the child stopped warm after killing its grandchild cold
    assert gone(grandchild)
    assert gone(child.pid)


@pytest.mark.skipif(
    simulation() is not None and not POSIX,
    reason="Windows holds this tree in a job object, which the simulation cannot create",
)
def test_what_a_child_leaves_behind_is_killed_when_it_is_reaped(start_method, make_settings):
    make_settings()
    child = launch(ChildSpec("test-shell", f"{TARGETS}:leave_background_job"), method=start_method)
    child.wait_ready()
    orphan = child.channel.recv(timeout=60).values["orphan"]
    assert running(orphan)
    # Its parent has exited: the orphan is no longer a descendant of the child. POSIX
    # finds it in the child's process group, Windows in the child's job.
    assert orphan not in {p.pid for p in psutil.Process(child.pid).children(recursive=True)}

    child.channel.send(Go(id=child.channel.next_id()))
    status = child.join(timeout=60)

    assert status.exitcode == 0
    assert gone(orphan)


def test_a_child_stops_warm_on_request(start_method, make_settings):
    # SIGTERM on POSIX; the control pipe on Windows.
    make_settings()
    child = launch(ChildSpec("test-child", "spawnflow.processors.probe:wait_for_stop"),
                   method=start_method)  # fmt: skip
    child.wait_ready()

    status = child.stop(grace=30)

    assert (status.cold, status.exitcode) == (False, 0)


def test_a_child_blocked_in_a_read_on_its_channel_stops_warm(start_method, make_settings):
    # Windows: the control pipe's watcher must break the main thread out of a blocking
    # read, not just flag a signal that only runs when the main thread wakes on its own.
    make_settings()
    child = launch(ChildSpec("test-echo", f"{TARGETS}:echo_server"), method=start_method)
    child.wait_ready()

    status = child.stop(grace=30)

    assert (status.cold, status.exitcode) == (False, 0)


class _CountedRequests:
    """A child's platform in the parent, counting the warm stops it is asked to send."""

    def __init__(self, platform):
        self.platform = platform
        self.warm_stops = 0

    def request_warm_stop(self, *args, **kwargs):
        self.warm_stops += 1
        return self.platform.request_warm_stop(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.platform, name)


@pytest.mark.parametrize("how", ["one", "many"])
def test_a_stop_without_grace_kills_without_asking(how, start_method, make_settings):
    # A child asked to stop acts on it (a worker records its try as failed); with no
    # grace it is killed before it could finish, so it must not be asked: the
    # scheduler's cold stop queues the try again instead.
    make_settings()
    child = launch(ChildSpec("test-child", "spawnflow.processors.probe:wait_for_stop"),
                   method=start_method)  # fmt: skip
    child.wait_ready()
    counted = child._platform = _CountedRequests(child._platform)

    if how == "one":
        status = child.stop(grace=0)
    else:
        stop_many([child], grace=0)
        status = child.exit_status

    assert counted.warm_stops == 0
    assert status.cold, status
    assert gone(child.pid)


@pytest.mark.parametrize("key", ["ctrl-c", "ctrl-break"])
def test_a_child_on_a_windows_console_ignores_its_ctrl_c_and_ctrl_break(
    key, start_method, make_settings
):
    # A Windows console sends both to every process attached to it; a child leaves them
    # to the top-level command, which stops it through the control pipe.
    if not platforms.current().console_broadcast:
        pytest.skip("only a Windows console sends its Ctrl-C and Ctrl-Break to every process")
    console = simulation()
    if console is None:
        pytest.skip("a real console's key would reach the test runner too: the simulation's")
    make_settings()
    child = launch(ChildSpec("test-echo", f"{TARGETS}:echo_server"), method=start_method)
    child.wait_ready()

    signum = signal.SIGINT if key == "ctrl-c" else signal.SIGBREAK  # type: ignore[attr-defined]
    console.real.kill(child.pid, signum)  # as the console delivers it to this child
    # Sent after the key: a child that acted on the key would not be there to answer.
    answer = child.channel.call(Echo(id=child.channel.next_id(), payload="still here"),
                                timeout=60)  # fmt: skip

    assert answer == Echoed(id=answer.id, payload="still here")
    status = child.stop(grace=30)
    assert (status.cold, status.exitcode) == (False, 0)
