"""Start methods: availability, per-component choice, the forkserver preload list."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import startmethods
from spawnflow.bootstrap.settings import resolve


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


def test_forkserver_preload_imports_no_sqlalchemy_no_threads_no_sockets():
    script = (
        "import json, sys, threading, psutil\n"
        "from spawnflow.bootstrap.startmethods import FORKSERVER_PRELOAD\n"
        "for name in FORKSERVER_PRELOAD: __import__(name)\n"
        "print(json.dumps({'sqlalchemy': 'sqlalchemy' in sys.modules,"
        " 'threads': threading.active_count(),"
        " 'sockets': len(psutil.Process().net_connections(kind='all'))}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"sqlalchemy": False, "threads": 1, "sockets": 0}
