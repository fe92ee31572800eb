"""The triggerer from the command line, and deferred tasks in ``dags test``, ``tasks test``,
``tasks states`` and ``triggers list``, under each start method (SQLite)."""

from __future__ import annotations

import re

import pytest

from spawnflow.comms.states import TaskState
from tests.commands.test_cli import run
from tests.oskit import press_ctrl_c
from tests.scheduler import harness
from tests.scheduler.test_e2e import environment, query, start, wait_for
from tests.triggerer.harness import write_dags
from tests.triggerer.test_deferral import schedule_until

pytestmark = pytest.mark.process


@pytest.fixture
def project(tmp_path, home, start_method):
    url = f"sqlite:///{(tmp_path / 'cli.db').as_posix()}"
    write_dags(tmp_path / "dags", tmp_path / "gates", tmp_path / "marks")
    env = environment(home, start_method, url, tmp_path / "dags",
                      SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                      SPAWNFLOW__TRIGGERER__POLL_INTERVAL="0.1")  # fmt: skip
    assert run("db", "migrate", env=env).exit_code == 0
    return env, url, tmp_path / "gates"


def test_dags_test_runs_a_deferring_dag_through_a_triggerer_of_its_own(project):
    env, _, _ = project
    result = run("dags", "test", "blocks_the_loop", env=env)
    assert result.exit_code == 0, result.output
    # Each change without its time and how long the try took.
    said = [
        re.sub(r"^\d\d:\d\d:\d\d  | after .*$", "", line) for line in result.stdout.splitlines()
    ]
    assert said.index("sleepy: deferred") < said.index("sleepy: success")


def test_tasks_test_runs_the_trigger_itself_and_resumes_the_task(project):
    env, _, gates = project
    (gates / "open").write_text("")
    result = run("tasks", "test", "waits_for_a_gate", "waits", env=env)
    assert result.exit_code == 0, result.output
    assert "(deferred to FileTrigger; running its trigger here until it fires, then " \
           "resume_waits)" in result.stdout  # fmt: skip
    # The resumed method's return value, with the trigger's event in it.
    assert "XCom return_value: {'path': 'open', 'note': 'kept'}" in result.stdout
    assert result.stdout.splitlines()[-1] == "Task 'waits': success"


def test_triggers_list_and_tasks_states_show_what_waits(project, start_method, make_settings,
                                                       tmp_path):  # fmt: skip
    env, url, _ = project
    assert run("dag-processor", "--once", env=env).exit_code == 0
    listed = run("triggers", "list", env=env)
    assert listed.exit_code == 0, listed.output
    assert "asset file://watched (watcher drops)" in listed.stdout
    assert "(none yet)" in listed.stdout

    settings = make_settings(**{
        "database.url": url, "core.dags_folder": str(tmp_path / "dags"),
        "core.load_examples": "false", "core.mp_start_method": start_method,
        "executor.heartbeat_interval": "0.2", "scheduler.loop_interval": "0.1",
    })  # fmt: skip
    run_id = harness.trigger("waits_for_a_gate")
    schedule_until(settings, {run_id}, lambda: harness.task_instances(run_id)["waits"].state
                   == TaskState.DEFERRED)  # fmt: skip
    (name,) = [r[0] for r in query(url, f"SELECT run_id FROM dag_run WHERE id = {run_id}")]
    states = run("tasks", "states", "waits_for_a_gate", name, env=env)
    assert states.stdout.splitlines()[2].split()[:3] == ["waits", "deferred", "1"]
    listed = run("triggers", "list", env=env).stdout
    assert f"waits_for_a_gate.waits (run {name})" in listed


def test_the_triggerer_stops_warm_on_ctrl_c_and_hands_its_triggers_back(project):
    env, url, _ = project
    assert run("dag-processor", "--once", env=env).exit_code == 0
    triggerer = start("triggerer", env=env)
    try:
        # Its runner starts once it claimed the asset watcher. Ctrl-C comes after that
        # launch: on Windows a process that starts a child ignores Ctrl-C meanwhile, so
        # that the child is born ignoring it (see Platform.launching).
        assert triggerer.stderr is not None  # a pipe, as asked
        before = []
        while not before or "trigger runner started" not in before[-1]:
            before.append(triggerer.stderr.readline())
            assert before[-1], "the triggerer ended before its runner started"
        wait_for(lambda: query(url, "SELECT triggerer_id FROM trigger") not in ([], [(None,)]),
                 what="the triggerer claiming the asset watcher")  # fmt: skip
        press_ctrl_c(triggerer)
        out, err = triggerer.communicate(timeout=120)
        err = "".join(before) + err
    finally:
        if triggerer.poll() is None:
            triggerer.kill()
    assert triggerer.returncode == 130, err
    assert "Traceback" not in out + err, err
    assert query(url, "SELECT triggerer_id FROM trigger") == [(None,)]
    assert query(url, "SELECT state FROM job WHERE job_type = 'triggerer'") == [("stopped",)]


def test_standalones_status_line_counts_the_deferred_task(project):
    import subprocess
    import sys
    import threading

    from tests.oskit import start_in_console

    env, _, gates = project
    assert run("dag-processor", "--once", env=env).exit_code == 0
    assert run("dags", "trigger", "waits_for_a_gate", env=env).exit_code == 0
    standalone = start_in_console(
        [sys.executable, "-m", "spawnflow", "standalone", "--exit-when-idle"], env=env,
        text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    lines: list[str] = []  # one reader of the pipe: this thread
    reader = threading.Thread(target=lambda: lines.extend(standalone.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("1 deferred" in line for line in lines),
                 what="the status line to count the deferred task")  # fmt: skip
        (gates / "open").write_text("")  # the trigger fires; the task resumes and ends
        standalone.wait(timeout=300)
    finally:
        if standalone.poll() is None:
            press_ctrl_c(standalone)
            standalone.wait(timeout=60)
        reader.join(timeout=60)
        standalone.stdout.close()
    assert standalone.returncode == 0, "".join(lines)
    deferred = next(line for line in lines if "1 deferred" in line)
    assert "scheduler: 1 active run(s), 0 task(s) running, 1 deferred" in deferred
