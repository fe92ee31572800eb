"""The OS simulation itself: it must reach children, or it proves nothing about them.

Each test starts a fresh interpreter with the simulation switched on, whatever this
run simulates, so these checks run natively and under both simulations alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SIMULATE = Path(__file__).parents[1] / "simulate"
ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.process

# A spawned grandchild reports what it sees: the launcher's child runs this target.
PROBE = textwrap.dedent(
    """
    import json, os, signal, sys
    import multiprocessing
    from spawnflow.bootstrap import launcher, settings
    from spawnflow.bootstrap import platform as platforms
    import tests.fixtures.messages

    settings.install(settings.resolve())
    seen = {"parent": {
        "platform": platforms.current().name,
        "register_at_fork": hasattr(os, "register_at_fork"),
        "methods": multiprocessing.get_all_start_methods(),
    }}
    spec = launcher.ChildSpec("test-child", "tests.fixtures.targets:report_os")
    with launcher.launch(spec, method="spawn") as child:
        child.wait_ready()
        seen["child"] = child.channel.recv(timeout=120).values
        child.join(timeout=60)
    print(json.dumps(seen))
    """
)


def run_simulated(simulated: str, code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.update({
        "SPAWNFLOW_TEST_SIMULATE_OS": simulated,
        "PYTHONPATH": os.pathsep.join([str(SIMULATE), str(ROOT)]),
        "SPAWNFLOW_HOME": str(tmp_path),
    })  # fmt: skip
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


@pytest.mark.parametrize(
    ("simulated", "platform", "methods", "fork_hooks"),
    [("windows", "windows", ["spawn"], False), ("macos", "darwin", None, True)],
)
def test_a_spawned_child_runs_under_the_same_simulated_os(
    simulated, platform, methods, fork_hooks, tmp_path
):
    done = run_simulated(simulated, PROBE, tmp_path)

    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    for process in ("parent", "child"):
        assert seen[process]["platform"] == platform, process
        assert seen[process]["register_at_fork"] is fork_hooks, process
        if methods is not None:
            assert seen[process]["methods"] == methods, process


def test_the_windows_simulation_reports_kills_as_exit_codes(tmp_path):
    code = textwrap.dedent(
        """
        import subprocess, sys, psutil
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        psutil.Process(process.pid).kill()
        print(process.wait(timeout=60))
        """
    )
    done = run_simulated("windows", code, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["15"]  # psutil's TerminateProcess(handle, 15) on Windows


def test_the_windows_simulation_hides_posix_only_modules_but_not_a_users(tmp_path):
    (tmp_path / "resource.py").write_text("WHO = 'user'\n")
    code = textwrap.dedent(
        f"""
        import sys
        try:
            import fcntl
        except ImportError:
            print("no fcntl")
        sys.path.insert(0, {str(tmp_path)!r})
        import resource
        print(resource.WHO)
        """
    )
    done = run_simulated("windows", code, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["no fcntl", "user"]


def test_the_macos_simulation_refuses_long_unix_socket_paths(tmp_path):
    code = textwrap.dedent(
        """
        import socket
        server = socket.socket(socket.AF_UNIX)
        try:
            server.bind("/tmp/" + "x" * 99)  # 104 bytes: fits Linux, not macOS
        except OSError as error:
            print(error)
        """
    )
    done = run_simulated("macos", code, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "AF_UNIX path too long"


def test_the_windows_simulation_refuses_a_wait_on_more_than_63_objects(tmp_path):
    code = textwrap.dedent(
        """
        import multiprocessing
        from multiprocessing.connection import wait
        pipes = [multiprocessing.Pipe(duplex=False) for _ in range(64)]
        try:
            wait([reader for reader, _ in pipes], timeout=0)
        except ValueError as error:
            print(error)
        """
    )
    done = run_simulated("windows", code, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "need at most 63 handles, got a sequence of length 64"
