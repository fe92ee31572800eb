"""Forkservers a tree shares: its processes fork from the servers its top process
started, and still no orphan survives its supervisor (law 7)."""

from __future__ import annotations

import psutil
import pytest

from spawnflow.bootstrap import forkservers
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.child import stop_many
from spawnflow.bootstrap.launcher import launch
from tests.process.test_orphans import kill_if_running
from tests.process.test_stop import gone, running, supervisor_spec

pytestmark = pytest.mark.process


@pytest.fixture
def sharing(start_method, make_settings):
    """Settings whose children start under forkserver, with this process's servers shared
    with the supervisors the test launches; only the forkserver method has servers."""
    if start_method != "forkserver":
        pytest.skip("only the forkserver start method has servers to share")

    def settings(**overrides: str):
        make_settings(**{"core.mp_start_method": "forkserver", **overrides})
        forkservers.share(settings_module.current(), ["test-supervisor", "test-grandchild"])

    return settings


def launch_supervisor(**kwargs) -> tuple:
    """A supervisor handed our servers, and the grandchild it launched through them."""
    spec = supervisor_spec({"method": "forkserver", **kwargs})
    supervisor = launch(spec, method="forkserver", share_forkservers=True)
    supervisor.wait_ready()
    report = supervisor.channel.recv(timeout=120).values
    return supervisor, report


def test_a_grandchild_forks_from_the_server_its_supervisor_was_handed(sharing):
    sharing()
    supervisor, report = launch_supervisor(grandchild="wait_quietly")
    try:
        server = forkservers.server_for("test-grandchild")._forkserver_pid
        assert psutil.Process(report["grandchild"]).ppid() == server
        assert not [p for p in psutil.Process(supervisor.pid).children() if p.pid == server]
    finally:
        supervisor.stop(grace=30)
    assert gone(report["grandchild"])


def test_a_grandchild_not_forked_by_its_supervisor_stops_when_the_supervisor_is_killed(sharing):
    # No parent-death signal reaches it from the supervisor (its parent is the server):
    # its control pipe's EOF does, on Linux too.
    sharing(**{"core.stop_grace_period": "5"})
    supervisor, report = launch_supervisor(grandchild="wait_quietly")

    psutil.Process(supervisor.pid).kill()

    supervisor.join(timeout=60)
    assert gone(report["grandchild"], timeout=60)


def test_user_code_not_forked_by_its_supervisor_dies_at_once_with_it(sharing):
    sharing(**{"core.stop_grace_period": "60"})  # an orphan stopping warm would linger
    supervisor, report = launch_supervisor(grandchild="start_a_sleeper", kill_with_parent=True)
    grandchild, sleeper = report["grandchild"], report["sleeper"]
    try:
        psutil.Process(supervisor.pid).kill()

        supervisor.join(timeout=60)
        assert gone(grandchild, timeout=30), "user code outlived its killed parent"
        assert gone(sleeper, timeout=30), "what user code started outlived its killed parent"
    finally:
        kill_if_running(grandchild, sleeper)


@pytest.mark.parametrize("whole_tree", [True, False], ids=["whole-tree", "the-child-alone"])
def test_a_cold_stop_of_the_whole_tree_takes_what_the_shared_servers_forked(sharing, whole_tree):
    """A grandchild that nothing but a kill ends, forked by our server for a supervisor:
    a walk of the supervisor's tree cannot find it, a stop of the whole tree kills it."""
    sharing()
    supervisor, report = launch_supervisor(grandchild="outlive_its_supervisor")
    grandchild = report["grandchild"]
    try:
        stop_many([supervisor], grace=0, whole_tree=whole_tree)

        assert not running(supervisor.pid)
        if whole_tree:
            assert gone(grandchild, timeout=30)
        else:
            assert running(grandchild)
    finally:
        kill_if_running(grandchild)
