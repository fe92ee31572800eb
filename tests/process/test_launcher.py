"""The launcher under each start method: boot, settings, logging, failures, the wire."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from spawnflow.bootstrap import lifecycle
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.launcher import ChildBootError, ChildSpec, launch
from spawnflow.bootstrap.wire import ErrorResponse
from tests.fixtures.messages import Echo, Echoed, Finished, Go

pytestmark = pytest.mark.process
TARGETS = "tests.fixtures.targets"


def test_child_reports_ready_with_its_pid_role_and_method(start_method, make_settings):
    make_settings()
    with launch(ChildSpec("test-child", f"{TARGETS}:wait_for_go"), method=start_method) as child:
        ready = child.wait_ready()
        assert (ready.pid, ready.role, ready.method) == (child.pid, "test-child", start_method)
        # Measured by the parent, the child's boot is part of its ready latency.
        assert child.ready_seconds >= ready.boot_seconds > 0
        request_id = child.channel.next_id()
        child.channel.send(Go(id=request_id))
        assert child.channel.recv(timeout=60) == Finished(id=request_id)
        assert child.join(timeout=60).exitcode == lifecycle.EXIT_OK


def test_a_child_is_named_after_its_role_in_ps_and_top(start_method, make_settings):
    """On Linux the kernel's name for the process (``/proc/<pid>/comm``) is its role,
    so that ``ps`` and ``top`` tell a spawned tree's processes apart."""
    if not platforms.current().parent_death_signal:
        pytest.skip("process names are set through Linux's prctl")
    make_settings()
    spec = ChildSpec("executor-worker", f"{TARGETS}:wait_for_go")
    with launch(spec, method=start_method) as child:
        child.wait_ready()
        comm = Path(f"/proc/{child.pid}/comm").read_text().strip()
        request_id = child.channel.next_id()
        child.channel.send(Go(id=request_id))
        assert child.channel.recv(timeout=60) == Finished(id=request_id)
        child.join(timeout=60)
    assert comm == "executor-worker"


def test_child_settings_equal_the_parent_snapshot_after_env_and_file_change(
    start_method, home, monkeypatch
):
    from spawnflow.bootstrap import settings

    home.mkdir(parents=True)
    config = home / "spawnflow.toml"
    config.write_text('[core]\nstop_grace_period = 7\n[logging]\nlevel = "WARNING"\n')
    environ = {"SPAWNFLOW_HOME": str(home), "SPAWNFLOW__DATABASE__CONNECT_TIMEOUT": "3"}
    snapshot = settings.resolve(environ=environ)
    settings.install(snapshot)
    # Everything a child could re-read changes after the parent resolved.
    config.write_text('[core]\nstop_grace_period = 99\n[logging]\nlevel = "DEBUG"\n')
    monkeypatch.setenv("SPAWNFLOW__DATABASE__CONNECT_TIMEOUT", "42")
    monkeypatch.setenv("SPAWNFLOW__LOGGING__LEVEL", "ERROR")
    assert settings.resolve() != snapshot  # a fresh resolution would differ

    with launch(
        ChildSpec("test-child", f"{TARGETS}:report_settings"), method=start_method
    ) as child:
        child.wait_ready()
        report = child.channel.recv(timeout=60)
        assert child.join(timeout=60).exitcode == 0

    assert report.values["plain"] == snapshot.as_plain()
    assert report.values["plain"]["core"]["stop_grace_period"] == 7.0
    assert report.values["plain"]["database"]["connect_timeout"] == 3
    assert report.values["sources"]["database.connect_timeout"] == (
        "environment variable SPAWNFLOW__DATABASE__CONNECT_TIMEOUT"
    )
    assert report.values["sources"]["core.stop_grace_period"] == f"config file {config} line 2"


def test_child_configures_logging_for_its_role_and_stdlib_records_join_it(
    start_method, make_settings
):
    snapshot = make_settings()
    nonce = uuid.uuid4().hex
    spec = ChildSpec("test-logger", f"{TARGETS}:log_and_report", {"nonce": nonce})
    with launch(spec, method=start_method) as child:
        child.wait_ready()
        report = child.channel.recv(timeout=60)
        child.join(timeout=60)

    log_file = Path(snapshot.logging.base_log_folder) / "test-logger.log"
    assert report.values["role"] == "test-logger"
    assert report.values["log_file"] == str(log_file)
    # Only the child's own handler: nothing inherited from the parent (pytest's, under fork).
    assert report.values["handlers"] == ["RotatingLogFileHandler"]  # a role's file rotates
    events = [json.loads(line) for line in log_file.read_text().splitlines()]
    mine = [e for e in events if nonce in json.dumps(e)]
    assert {e["logger"] for e in mine} == {"tests.child", "sqlalchemy.pool.fake"}
    assert all(e["role"] == "test-logger" and e["pid"] == child.pid for e in mine)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("tests.fixtures.no_such_module:run", "No module named 'tests.fixtures.no_such_module'"),
        (f"{TARGETS}:no_such_function", "has no attribute 'no_such_function'"),
        ("tests.fixtures.broken_import:run", "this module refuses to be imported"),
    ],
)
def test_a_child_whose_target_cannot_be_imported_reports_a_boot_failure(
    start_method, make_settings, target, expected
):
    make_settings()
    child = launch(ChildSpec("test-child", target), method=start_method)
    with pytest.raises(ChildBootError) as raised:
        child.wait_ready()
    message = str(raised.value)
    assert message.startswith(f"child process 'test-child' (pid {child.pid}, {start_method})")
    assert "could not boot (target import)" in message
    assert expected in message
    assert "\n" not in message
    assert child.exit_status.exitcode == lifecycle.EXIT_BOOT_FAILED


@pytest.mark.parametrize(
    ("target", "kwargs", "exitcode", "described"),
    [
        ("exit_with", {"code": 5}, 5, "exited with code 5"),
        ("raise_error", {}, lifecycle.EXIT_TARGET_FAILED, "exited with code 1 (target failed)"),
    ],
)
def test_exit_status_tells_how_the_target_ended(
    start_method, make_settings, target, kwargs, exitcode, described
):
    snapshot = make_settings()
    with launch(
        ChildSpec("test-child", f"{TARGETS}:{target}", kwargs), method=start_method
    ) as child:
        child.wait_ready()
        status = child.join(timeout=60)
    assert (status.exitcode, status.describe()) == (exitcode, described)
    if target == "raise_error":
        log = (Path(snapshot.logging.base_log_folder) / "test-child.log").read_text()
        assert "the target failed on purpose" in log
        assert "Traceback" in log


def test_requests_are_answered_by_id_with_typed_errors(start_method, make_settings):
    make_settings()
    with launch(ChildSpec("test-echo", f"{TARGETS}:echo_server"), method=start_method) as child:
        child.wait_ready()
        ids = [child.channel.next_id() for _ in range(3)]
        child.channel.send(Echo(id=ids[0], payload={"a": [1, 2]}))
        child.channel.send(Go(id=ids[1]))
        child.channel.send(Echo(id=ids[2], payload="last"))
        answers = {message.id: message for message in (child.channel.recv(timeout=60) for _ in ids)}
    assert answers[ids[0]] == Echoed(id=ids[0], payload={"a": [1, 2]})
    assert answers[ids[1]] == ErrorResponse(id=ids[1], kind="UNKNOWN_REQUEST", message="Go")
    assert answers[ids[2]] == Echoed(id=ids[2], payload="last")


def test_a_launched_child_that_does_not_touch_the_database_never_imports_sqlalchemy(
    start_method, tmp_path
):
    # Run the parent in a clean interpreter: under fork a child inherits its parent's
    # modules, and this pytest process has imported SQLAlchemy long ago.
    script = textwrap.dedent(
        f"""
        import json, sys
        from spawnflow.bootstrap import settings
        from spawnflow.bootstrap.launcher import ChildSpec, launch
        import tests.fixtures.messages  # registers the Report message
        settings.install(settings.resolve())
        spec = ChildSpec("test-child", "{TARGETS}:report_modules")
        with launch(spec, method="{start_method}") as child:
            child.wait_ready()
            modules = child.channel.recv(timeout=60).values["modules"]
            child.join(timeout=60)
        print(json.dumps({{"parent": sorted(sys.modules), "child": modules}}))
        """
    )
    env = {**os.environ, "SPAWNFLOW_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert "spawnflow.bootstrap.launcher" in found["child"]
    for heavy in ("sqlalchemy", "alembic", "click"):
        assert heavy not in found["parent"]
        assert heavy not in found["child"]


#: A parent script whose top level notes each time it runs, and under which name.
RUNS_ITS_TOP_LEVEL = """
from pathlib import Path

with open({marker!r}, "a") as marker:
    marker.write(__name__ + "\\n")

if __name__ == "__main__":
    from spawnflow.bootstrap import settings
    from spawnflow.bootstrap.launcher import ChildSpec, launch

    settings.install(settings.resolve())
    with launch(ChildSpec("test-child", "{targets}:exit_with", {{"code": 0}}),
                method={method!r}) as child:
        child.wait_ready()
        print(child.join(timeout=60).exitcode)
"""


def test_a_child_does_not_run_its_parents_main_script_again(start_method, tmp_path):
    """multiprocessing runs the parent's main script again, as ``__mp_main__``, in every
    spawned and forkserver child; a launcher child enters through an import string and
    skips it: no cost of the script's imports per child, and a script's top level that
    has no ``__main__`` guard does not run once per child."""
    marker = tmp_path / "runs"
    script = tmp_path / "parent_script.py"
    script.write_text(RUNS_ITS_TOP_LEVEL.format(marker=str(marker), targets=TARGETS,
                                                method=start_method))  # fmt: skip
    env = {**os.environ, "SPAWNFLOW_HOME": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]),
                                          os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=120, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
    assert marker.read_text().split() == ["__main__"]


def test_spec_refuses_live_objects_in_kwargs():
    import threading

    with pytest.raises(TypeError, match=r"ChildSpec.kwargs\['lock'\] is a _thread.lock"):
        ChildSpec("test-child", f"{TARGETS}:wait_for_go", {"lock": threading.Lock()})
    with pytest.raises(TypeError, match=r"kwargs\['nested'\]\['f'\]"):
        ChildSpec("test-child", f"{TARGETS}:wait_for_go", {"nested": {"f": open}})
    ChildSpec("test-child", f"{TARGETS}:wait_for_go", {"path": Path("x"), "ids": [1, (2, "3")]})


@pytest.mark.parametrize(("role", "target"), [("Bad Role", "a:b"), ("ok", "no-colon")])
def test_spec_refuses_malformed_role_or_target(role, target):
    with pytest.raises(ValueError, match="must be"):
        ChildSpec(role, target)


def test_captured_output_reaches_the_parent_from_every_writer(start_method, make_settings):
    from multiprocessing.connection import wait

    from spawnflow.bootstrap import platform as platforms

    make_settings()
    spec = ChildSpec("test-printer", f"{TARGETS}:print_everywhere", capture_output=True)
    child = launch(spec, method=start_method)
    child.wait_ready()
    received = {"stdout": b"", "stderr": b""}
    open_streams = {"stdout": child.stdout, "stderr": child.stderr}
    while open_streams:
        for ready in wait(list(open_streams.values()), timeout=60):
            name = next(n for n, c in open_streams.items() if c is ready)
            data = platforms.current().read_output(ready)
            if data:
                received[name] += data
            else:
                del open_streams[name]
    assert child.join(timeout=60).exitcode == 0
    assert received["stdout"].decode().splitlines() == [
        "python stdout", "raw fd 1", "from a subprocess",
    ]  # fmt: skip
    assert received["stderr"].decode().splitlines() == ["python stderr"]


# Ends with its child still running: the launcher must stop it, and the exit not hang.
ENDS_WITH_A_CHILD_RUNNING = """
import multiprocessing.util  # its exit handler registers again on its logger's first use
from spawnflow.bootstrap import launcher, settings
settings.install(settings.resolve())
spec = launcher.ChildSpec("test-child", "spawnflow.processors.probe:wait_for_stop")
child = launcher.launch(spec, method={method!r})
child.wait_ready(timeout=120)
multiprocessing.util.get_logger()
print(child.pid, flush=True)
"""


def test_a_script_that_ends_with_a_child_running_stops_it_and_exits(start_method, tmp_path):
    from tests.process.test_stop import gone

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env["SPAWNFLOW_HOME"] = str(tmp_path)
    script = subprocess.Popen(
        [sys.executable, "-c", ENDS_WITH_A_CHILD_RUNNING.format(method=start_method)], env=env,
        cwd=Path(__file__).parents[2], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        out, err = script.communicate(timeout=120)
    finally:
        if script.poll() is None:  # it hung at exit: take it and its child down
            import psutil

            for process in psutil.Process(script.pid).children(recursive=True):
                process.kill()
            script.kill()
            script.communicate()
    assert script.returncode == 0, err
    assert gone(int(out.split()[-1])), "the child outlived the script"


def test_only_windows_children_run_a_thread_to_watch_their_control_pipe(
    start_method, make_settings
):
    # macOS children learn of their parent's death from a signal (O_ASYNC on the control
    # pipe): a thread there would make every fork in the child a multi-threaded fork.
    make_settings()
    platform = platforms.current()
    assert platform.control_by_signal is (platform.name == "darwin")
    with launch(ChildSpec("test-child", f"{TARGETS}:report_threads"), method=start_method) as child:
        child.wait_ready()
        threads = child.channel.recv(timeout=60).values["threads"]
        child.join(timeout=60)

    watched_by_thread = platform.name == "windows"
    assert ("spawnflow-control" in threads) is watched_by_thread, threads
    assert len(threads) == (2 if watched_by_thread else 1), threads


#: What a Windows anonymous pipe takes before ``WriteFile`` waits for its reader.
#: multiprocessing asks ``CreatePipe`` for "the default buffer size", which Microsoft does
#: not give in bytes; one page (4 KiB) is the size commonly reported.
WINDOWS_PIPE_BUFFER = 4096


def test_what_a_spawned_task_is_sent_fits_a_windows_pipe_buffer(make_settings, monkeypatch):
    """Windows' spawn writes the child's preparation data and process object into a pipe
    after CreateProcess; past the pipe's buffer the parent waits for the child to read,
    that is, for its whole interpreter start, with Ctrl-C held off meanwhile. Measured
    here at the pickler the standard library writes through, for a task's spec (its
    workload, captured output), launched from a process started as ``spawnflow
    scheduler`` (the preparation data carries the parent's ``sys.argv``)."""
    import datetime as dt
    import io
    import multiprocessing.reduction

    from spawnflow.comms.tasks import Workload

    make_settings()
    written: list[int] = []
    dump = multiprocessing.reduction.dump

    def measured_dump(obj, file, protocol=None):
        pickled = io.BytesIO()  # measured here: tell() on a Windows pipe says nothing
        dump(obj, pickled, protocol)
        written.append(len(pickled.getbuffer()))
        file.write(pickled.getbuffer())

    monkeypatch.setattr(multiprocessing.reduction, "dump", measured_dump)
    monkeypatch.setattr(sys, "argv", [str(Path(sys.executable).with_name("spawnflow")),
                                      "scheduler"])  # fmt: skip
    now = dt.datetime.now(dt.UTC)
    workload = Workload(
        ti_id=7, dag_id="an_etl_dag", run_id=f"manual__{now.isoformat()}", task_id="load",
        try_number=1, dag_file="/home/someone/spawnflow/dags/an_etl_dag.py",
        dags_folder="/home/someone/spawnflow/dags", logical_date=now,
        data_interval_start=now, data_interval_end=now, conf={}, params={},
        execution_timeout=None, retry_delay=300.0, log_file="dag_id=an_etl_dag/load.log",
    )  # fmt: skip
    spec = ChildSpec("task", f"{TARGETS}:take_and_leave", {"workload": workload},
                     capture_output=True, kill_with_parent=True)  # fmt: skip
    with launch(spec, method="spawn") as child:
        assert child.join(timeout=120).exitcode == 0
    assert len(written) == 2, written  # the preparation data, then the process object
    assert sum(written) < WINDOWS_PIPE_BUFFER, written
