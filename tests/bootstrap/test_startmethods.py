"""Start methods: availability, per-component choice, the forkserver preload list."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import startmethods
from spawnflow.bootstrap.settings import resolve

ROOT = Path(__file__).parents[2]


def test_a_component_method_wins_over_core(home):
    snapshot = resolve(
        environ={
            "SPAWNFLOW_HOME": str(home),
            "SPAWNFLOW__CORE__MP_START_METHOD": "spawn",
            "SPAWNFLOW__DAG_PROCESSOR__MP_START_METHOD": "fork",
        },
        platform=platforms.LINUX,
    )
    assert startmethods.for_component(snapshot, "dag_processor")[0] == "fork"
    assert startmethods.for_component(snapshot, "scheduler")[0] == "spawn"
    method, source = startmethods.for_component(snapshot, "executor")
    assert (method, str(source)) == (
        "spawn",
        "environment variable SPAWNFLOW__CORE__MP_START_METHOD",
    )
    with pytest.raises(ValueError, match="unknown component"):
        startmethods.for_component(snapshot, "webserver")


def test_check_lists_what_this_machine_offers():
    with pytest.raises(startmethods.StartMethodUnavailable) as raised:
        startmethods.check("fork", platforms.WINDOWS)
    assert str(raised.value) == (
        "start method 'fork' is not available on Windows; this machine offers: spawn"
    )
    with pytest.raises(startmethods.StartMethodUnavailable, match="'thread' is not a start method"):
        startmethods.check("thread", platforms.LINUX)


@pytest.mark.parametrize("method", platforms.current().start_methods)
def test_context_is_the_asked_method_never_the_library_default(method):
    assert startmethods.context(method).get_start_method() == method


@pytest.mark.parametrize("kind", ["database", "user"])
def test_a_forkservers_preload_starts_no_thread_opens_no_socket_and_keeps_to_its_roles(kind):
    """Only the server of the roles that hold an engine loads SQLAlchemy."""
    script = (
        "import json, sys, threading, psutil\n"
        "from spawnflow.bootstrap.forkservers import PRELOAD\n"
        f"for name in PRELOAD[{kind!r}]: __import__(name)\n"
        "print(json.dumps({'sqlalchemy': 'sqlalchemy' in sys.modules,"
        " 'threads': threading.active_count(),"
        " 'sockets': len(psutil.Process().net_connections(kind='all'))}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["threads"], report["sockets"]) == (1, 0)
    assert report["sqlalchemy"] is (kind == "database")


def test_fork_is_allowed_on_macos_with_a_warning_naming_the_risk():
    with pytest.warns(startmethods.ForkUnsafeWarning, match="'fork' on macOS: a forked child can"):
        startmethods.warn_if_unsafe("fork", platforms.MACOS)


@pytest.mark.parametrize("platform", [platforms.LINUX, platforms.MACOS], ids=["linux", "macos"])
def test_the_other_methods_and_linux_fork_pass_without_a_warning(platform, recwarn):
    for method in ("forkserver", "spawn") if platform.fork_unsafe else ("fork", "forkserver"):
        startmethods.warn_if_unsafe(method, platform)
    assert not [w for w in recwarn if issubclass(w.category, startmethods.ForkUnsafeWarning)]


# A fresh interpreter: its forkserver must not have started yet, nor chosen a folder.
LONG_TMPDIR_LAUNCH = """
import sys
from spawnflow.bootstrap import launcher, settings
settings.install(settings.resolve())
spec = launcher.ChildSpec("test-child", "spawnflow.processors.probe:wait_for_stop")
with launcher.launch(spec, method="forkserver") as child:
    child.wait_ready(timeout=120)
print("ready")
"""


@pytest.mark.skipif("forkserver" not in platforms.current().start_methods, reason="no forkserver")
def test_the_forkserver_starts_under_a_temporary_folder_too_long_for_its_socket(tmp_path):
    # multiprocess puts the forkserver's socket at <TMPDIR>/pymp-XXXXXXXX/listener-XXXXXXXX:
    # past 103 bytes on macOS (107 on Linux) bind() fails with "AF_UNIX path too long".
    limit = platforms.current().unix_path_max
    deep = tmp_path / ("t" * max(1, limit - len(str(tmp_path)) - 10))
    deep.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.update(TMPDIR=str(deep), SPAWNFLOW_HOME=str(tmp_path / "home"))

    done = subprocess.run([sys.executable, "-c", LONG_TMPDIR_LAUNCH], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ready"]


def test_each_role_starts_with_its_components_method(home):
    snapshot = resolve(
        environ={
            "SPAWNFLOW_HOME": str(home),
            "SPAWNFLOW__CORE__MP_START_METHOD": "fork",
            "SPAWNFLOW__EXECUTOR__MP_START_METHOD": "spawn",
            "SPAWNFLOW__SCHEDULER__MP_START_METHOD": "forkserver",
        },
        platform=platforms.LINUX,
    )
    methods = {role: startmethods.for_role(snapshot, role)[0] for role in (
        "scheduler", "executor-worker", "task", "xcom-helper", "dag-processor", "file-parser",
        "doctor-probe",
    )}  # fmt: skip
    assert methods == {
        "scheduler": "forkserver",
        "executor-worker": "spawn", "task": "spawn", "xcom-helper": "spawn",
        "dag-processor": "fork", "file-parser": "fork", "doctor-probe": "fork",
    }  # fmt: skip
