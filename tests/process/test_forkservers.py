"""Forkservers a tree shares: its processes fork from the servers its top process
started (through servers of their own forked from those), and still no orphan survives
its supervisor (law 7), whatever state it is in."""

from __future__ import annotations

import select
import socket
from pathlib import Path

import psutil
import pytest

from spawnflow.bootstrap import forkservers
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.child import stop_many
from spawnflow.bootstrap.launcher import ChildSpec, launch
from tests.fixtures.messages import Go
from tests.process.test_orphans import kill_if_running
from tests.process.test_stop import gone, running, supervisor_spec

pytestmark = pytest.mark.process
#: Linux names each process's own server after its owner; elsewhere there are no names.
NAMED = platforms.current().parent_death_signal
#: The kernel ends a child whose parent died (Linux); elsewhere the child's own code does.
KERNEL_ENDS_ORPHANS = platforms.current().parent_death_signal


@pytest.fixture
def sharing(start_method, make_settings):
    """Settings whose children start under forkserver, with this process's servers shared
    with the supervisors the test launches (no longer once it ends); only the forkserver
    method has servers."""
    if start_method != "forkserver":
        pytest.skip("only the forkserver start method has servers to share")
    began: set[str] = set()

    def settings(**overrides: str):
        make_settings(**{"core.mp_start_method": "forkserver", **overrides})
        roles = ["test-supervisor", "test-grandchild"]
        began.update(forkservers.share(settings_module.current(), roles))

    yield settings
    forkservers.unshare(began)


def launch_supervisor(**kwargs) -> tuple:
    """A supervisor handed our servers, and the grandchild it launched through them."""
    spec = supervisor_spec({"method": "forkserver", **kwargs})
    supervisor = launch(spec, method="forkserver", share_forkservers=True)
    supervisor.wait_ready()
    report = supervisor.channel.recv(timeout=120).values
    return supervisor, report


def report_of_a_fresh_process(target: str) -> dict:
    """What ``target`` (of tests.fixtures.targets) reported in a spawned child: a process
    whose servers are its own from the start, whatever this worker's tests did to ours."""
    spec = ChildSpec("test-supervisor", f"tests.fixtures.targets:{target}")
    with launch(spec, method="spawn") as child:
        child.wait_ready(timeout=120)
        return child.channel.recv(timeout=120).values


def test_a_grandchild_forks_from_its_supervisors_server_forked_from_ours(sharing):
    sharing()
    supervisor, report = launch_supervisor(grandchild="wait_quietly")
    try:
        shared = forkservers.server_for("test-grandchild")._forkserver_pid
        own_server = psutil.Process(report["grandchild"]).parent()
        assert own_server.ppid() == shared  # forked from ours: no interpreter of its own
        assert own_server.pid != supervisor.pid
        if NAMED:
            assert own_server.name() == f"fs-{supervisor.pid}"
    finally:
        supervisor.stop(grace=30)
    assert gone(report["grandchild"])


def test_a_grandchild_stops_when_its_supervisor_is_killed(sharing):
    # Its parent is the supervisor's own server, which leaves with the supervisor.
    sharing(**{"core.stop_grace_period": "5"})
    supervisor, report = launch_supervisor(grandchild="wait_quietly")

    psutil.Process(supervisor.pid).kill()

    supervisor.join(timeout=60)
    assert gone(report["grandchild"], timeout=60)


@pytest.mark.parametrize("grandchild", ["start_a_sleeper", "deaf_to_signals"])
def test_user_code_whose_supervisor_is_killed_dies_at_once_even_if_no_handler_runs(
    sharing, grandchild
):
    """What the kernel does when a parent dies needs no Python code in the child: user
    code that runs no signal handler (a native call that never returns) ends with its
    supervisor too."""
    if grandchild == "deaf_to_signals" and not KERNEL_ENDS_ORPHANS:
        pytest.skip("only a kernel that ends orphans reaches code that runs no handler")
    sharing(**{"core.stop_grace_period": "60"})  # an orphan stopping warm would linger
    supervisor, report = launch_supervisor(grandchild=grandchild, kill_with_parent=True)
    pids = [report["grandchild"], *([report["sleeper"]] if "sleeper" in report else [])]
    try:
        psutil.Process(supervisor.pid).kill()

        supervisor.join(timeout=60)
        assert gone(pids[0], timeout=30), "user code outlived its killed parent"
        if len(pids) > 1:
            # What it started is in its process group, which its launcher's parent kills
            # (the executor does this for a lost worker's task).
            platforms.current().kill_orphaned_group(pids[0], 0.0)
            assert gone(pids[1], timeout=30), "what user code started outlived it"
    finally:
        kill_if_running(*pids)


@pytest.mark.parametrize("whole_tree", [True, False], ids=["whole-tree", "the-child-alone"])
def test_a_cold_stop_takes_what_a_child_launched_through_its_own_server(sharing, whole_tree):
    """A grandchild that nothing but a kill ends, forked for a supervisor by the
    supervisor's server: no descendant of the supervisor, yet in its tree's cold stop."""
    if not whole_tree and not NAMED:
        pytest.skip("without process names only a stop of the whole tree finds it")
    sharing()
    supervisor, report = launch_supervisor(grandchild="outlive_its_supervisor")
    grandchild = report["grandchild"]
    try:
        stop_many([supervisor], grace=0, whole_tree=whole_tree)

        assert not running(supervisor.pid)
        assert gone(grandchild, timeout=30)
    finally:
        kill_if_running(grandchild)


def test_a_shared_server_outlives_a_client_that_goes_away_in_the_middle_of_a_request(
    sharing,
):
    """A launcher killed while it talks to the server must not take the server (and with
    it every process it forked) down."""
    sharing()
    server = forkservers.server_for("test-grandchild")
    pid = server._forkserver_pid
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(server._forkserver_address)
        # Python 3.14's server speaks first (a key exchange): go once it has, unanswered.
        select.select([client], [], [], 1.0)
    # Gone, having sent nothing.
    spec = ChildSpec("test-grandchild", "tests.fixtures.targets:wait_quietly")
    with launch(spec, method="forkserver") as child:
        child.wait_ready(timeout=120)
        assert psutil.Process(child.pid).ppid() == pid
    assert server._forkserver_pid == pid
    assert running(pid)


def test_a_launchers_server_that_outlives_the_shared_one_is_kept(sharing):
    """The shared server dies (killed); the supervisor's own server, forked from it,
    runs on: the supervisor's next launch goes through it, and the grandchild it forked
    before is not ended by a server thought dead and replaced."""
    sharing()
    spec = ChildSpec("test-supervisor", "tests.fixtures.targets:supervise_twice",
                     {"method": "forkserver"}, warm_stop_group=False)  # fmt: skip
    # Spawned, so that it is no child of the server that dies (a server's own children
    # get the parent-death signal); it forks its grandchildren from that server.
    supervisor = launch(spec, method="spawn", share_forkservers=True)
    pids: list[int] = []
    try:
        supervisor.wait_ready()
        pids.append(supervisor.channel.recv(timeout=120).values["first"])
        psutil.Process(forkservers.server_for("test-grandchild")._forkserver_pid).kill()
        supervisor.channel.send(Go(id=1))
        pids.append(supervisor.channel.recv(timeout=120).values["second"])

        assert running(pids[0])
        assert psutil.Process(pids[1]).ppid() == psutil.Process(pids[0]).ppid()
    finally:
        supervisor.stop(grace=30)
        kill_if_running(*pids)


def test_the_database_server_is_forked_from_the_user_one_and_adds_its_preload(sharing):
    """One interpreter for the whole tree: the server of the roles that hold an engine is
    forked from the other one and imports SQLAlchemy on top, which its children share.
    Seen in a spawned child, whose servers are its own from the start."""
    sharing()
    report = report_of_a_fresh_process("share_both_servers")
    assert report["database_forked_by"] == report["user"]
    assert report["child_forked_by"] == report["database"]
    assert report["child_held"] == ["sqlalchemy.orm", "spawnflow.models"]
    # What it hands its children: both, which they fork servers of their own from.
    assert report["handed"] == [["database", report["database"]], ["user", report["user"]]]


def test_a_server_of_its_own_that_it_lets_go_leaves_and_the_next_launch_forks_another(
    sharing,
):
    """An executor whose last worker left lets its own server go (an idle tree keeps no
    server that forks nothing); its next worker forks from a new one."""
    sharing()
    spec = ChildSpec("test-supervisor", "tests.fixtures.targets:supervise_one_then_let_go",
                     warm_stop_group=False)  # fmt: skip
    supervisor = launch(spec, method="forkserver", share_forkservers=True)
    try:
        supervisor.wait_ready()
        first = supervisor.channel.recv(timeout=120).values
        assert first["kept"]  # let go while it forked a child that ran: kept
        assert gone(first["server"], timeout=60)
        supervisor.channel.send(Go(id=1))
        second = supervisor.channel.recv(timeout=120).values

        shared = forkservers.server_for("test-grandchild")._forkserver_pid
        assert second["server"] != first["server"]
        assert psutil.Process(second["server"]).ppid() == shared
        if NAMED:
            assert psutil.Process(second["server"]).name() == f"fs-{supervisor.pid}"
    finally:
        supervisor.stop(grace=30)


def test_a_process_handed_servers_shares_them_on_without_forking_its_own_early(sharing):
    """An executor in a process that was handed the tree's servers starts no server of
    its own for the tasks its workers launch (the workers fork their own)."""
    sharing()
    began = forkservers.share(settings_module.current(), ["scheduler"])
    spec = ChildSpec("test-supervisor", "tests.fixtures.targets:share_what_was_handed")
    try:
        with launch(spec, method="forkserver", share_forkservers=True) as child:
            child.wait_ready(timeout=120)
            report = child.channel.recv(timeout=120).values
    finally:
        forkservers.unshare(began)
    assert (report["began"], report["own"]) == ([], {"user": None, "database": None})


def test_a_whole_tree_stop_of_a_process_sharing_only_user_spares_its_database_server(
    sharing,
):
    """The database server of a process that shares only ``user`` (an executor run by
    ``spawnflow scheduler``) is a child of the shared one, yet its own: a stop of all
    its children leaves it running. Nor does it keep the ``user`` server alive: that
    server leaves with its owner. Seen in a spawned child, whose servers are its own."""
    sharing()
    report = report_of_a_fresh_process("share_only_user_then_stop_the_tree")
    assert report["database_runs"] is True
    assert report["holds_user_alive"] is (False if Path("/proc/self/fd").is_dir() else None)


def test_a_database_launch_of_a_process_handed_only_the_user_server_starts_an_interpreter(
    monkeypatch,
):
    """Its database server is then an interpreter of its own (it cannot fork one from a
    server it does not own): the launch is guarded as one that execs."""
    ref = forkservers.ServerRef("user", "/nonexistent/listener", 1)
    monkeypatch.setattr(forkservers, "_servers", {})
    forkservers.adopt([ref])
    assert forkservers.starts_by_exec("scheduler") is True
    assert forkservers.starts_by_exec("test-grandchild") is False


def test_a_shared_server_that_died_is_started_again_before_it_is_handed_down(sharing):
    """A child handed a dead server's address could launch nothing: the launch that
    hands it down starts it again first. Seen in a spawned child, whose servers are its
    own from the start."""
    sharing()
    report = report_of_a_fresh_process("hand_down_a_database_server_that_died")
    assert report["runs"] is True
    assert report["handed"] == report["now"] != report["killed"]
