"""The CLI as real processes: standalone, a scheduler killed and restarted, two schedulers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from sqlalchemy import create_engine, text

from spawnflow.bootstrap import platform as platforms
from tests.conftest import _server_database
from tests.oskit import POSIX, press_ctrl_break, press_ctrl_c, start_in_console
from tests.scheduler import harness

pytestmark = pytest.mark.process


def environment(home: Path, method: str, url: str, dags: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.update({
        "SPAWNFLOW_HOME": str(home),
        "SPAWNFLOW__DATABASE__URL": url,
        "SPAWNFLOW__CORE__DAGS_FOLDER": str(dags),
        "SPAWNFLOW__CORE__MP_START_METHOD": method,
        "SPAWNFLOW__CORE__STOP_GRACE_PERIOD": "3",
        "SPAWNFLOW__EXECUTOR__PARALLELISM": "2",
        "SPAWNFLOW__EXECUTOR__HEARTBEAT_INTERVAL": "0.2",
        "SPAWNFLOW__SCHEDULER__LOOP_INTERVAL": "0.1",
        "SPAWNFLOW__SCHEDULER__TASK_HEARTBEAT_TIMEOUT": "5",
        "SPAWNFLOW__SCHEDULER__JOB_HEARTBEAT_TIMEOUT": "3",
        "SPAWNFLOW__DAG_PROCESSOR__POLL_INTERVAL": "0.5",
        **extra,
    })  # fmt: skip
    return env


def spawnflow(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spawnflow", *args], env=env, timeout=timeout,
                          capture_output=True, text=True)  # fmt: skip


def start(*args: str, env: dict[str, str]) -> subprocess.Popen:
    """Start a command as a terminal would (see tests.oskit.press_ctrl_c)."""
    return start_in_console([sys.executable, "-m", "spawnflow", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def query(url: str, sql: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql))]
    finally:
        engine.dispose()


def wait_for(condition, timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.1)


def descendants(process: subprocess.Popen) -> list[psutil.Process]:
    return psutil.Process(process.pid).children(recursive=True)


def kill_if_running(command: subprocess.Popen) -> str:
    """After a test that failed to stop ``command``: kill its whole tree (its children
    would stop warm, taking the grace period, and hold its output pipes open meanwhile).
    What it wrote to stderr until then ("" if it had ended already)."""
    if command.poll() is not None:
        return ""
    for process in [*descendants(command), psutil.Process(command.pid)]:
        try:
            process.kill()
        except psutil.Error:
            pass
    _, err = command.communicate()
    return err or ""


def all_gone(processes: list[psutil.Process]) -> bool:
    _, alive = psutil.wait_procs(processes, timeout=30)
    return all(p.status() == psutil.STATUS_ZOMBIE for p in alive if p.is_running())


def test_standalone_runs_the_example_dags_until_idle(start_method, home, tmp_path):
    url = f"sqlite:///{(tmp_path / 'standalone.db').as_posix()}"
    env = environment(home, start_method, url, tmp_path / "no-dags")

    done = spawnflow("standalone", "--exit-when-idle", env=env)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    last = done.stdout.splitlines()[-1]
    assert last == "Done: every due Dag run has finished: 5 succeeded, 0 failed."
    states = dict(query(url, "SELECT dag_id, state FROM dag_run"))
    assert states == {"example_etl": "success", "example_command": "success",
                      "example_fan_out_in": "success", "example_branching": "success",
                      "example_mapping": "success"}  # fmt: skip
    mapped = query(
        url,
        "SELECT map_index, state FROM task_instance WHERE task_id = 'count_rows' "
        "AND dag_id = 'example_mapping' ORDER BY map_index",
    )
    assert [tuple(row) for row in mapped] == [(0, "success"), (1, "success"), (2, "success")]
    # The branch followed one task group (by the logical date's weekday) and skipped the
    # other; the report after them ran (trigger rule none_failed_min_one_success).
    branching = query(url, "SELECT task_id, state FROM task_instance "
                           "WHERE dag_id = 'example_branching'")  # fmt: skip
    by_group: dict[str, set[str]] = {}
    for task_id, state in branching:
        by_group.setdefault(task_id.split(".")[0], set()).add(state)
    assert sorted(by_group.items()) in (
        [("choose_load", {"success"}), ("full_load", {"success"}),
         ("incremental", {"skipped"}), ("report", {"success"})],
        [("choose_load", {"success"}), ("full_load", {"skipped"}),
         ("incremental", {"success"}), ("report", {"success"})],
    ), branching  # fmt: skip


#: A Dag whose task defers until ``marks/open`` exists: the triggerer then runs a runner.
DEFERS = """
from spawnflow import Dag, FileTrigger, TaskDeferred, task

with Dag("defers"):
    @task
    def defers():
        raise TaskDeferred(trigger=FileTrigger({gate!r}, poll_interval=0.1),
                           method_name="resume")

    defers()


def resume(event):
    return None
"""


@contextmanager
def standalone_holding_a_task(home: Path, method: str, tmp_path: Path, grace: str,
                              defer: bool = False):  # fmt: skip
    """``spawnflow standalone`` running the held task, which finishes once ``marks/open``
    exists, and with ``defer`` a deferred task waiting for the same file: (the process,
    its descendants, the database URL, the marks folder)."""
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    harness.write_dags(dags, marks)
    if defer:
        (dags / "defers.py").write_text(DEFERS.format(gate=str(marks / "open")))
    url = f"sqlite:///{(tmp_path / 'standalone.db').as_posix()}"
    env = environment(home, method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                      SPAWNFLOW__CORE__STOP_GRACE_PERIOD=grace)  # fmt: skip
    assert spawnflow("db", "migrate", env=env).returncode == 0
    standalone = start("standalone", env=env)
    try:
        # "held" is a manual Dag: trigger it once the processor has stored it.
        wait_for(lambda: spawnflow("dags", "trigger", "held", env=env).returncode == 0,
                 what="the held Dag to be known")  # fmt: skip
        # Its code runs: the task process has booted. (A Windows console's Ctrl-C that
        # finds a child still booting, before it could shield itself, kills it.)
        wait_for(lambda: (marks / "hold-started").exists(), what="the held task to run")
        if defer:
            wait_for(lambda: spawnflow("dags", "trigger", "defers", env=env).returncode == 0,
                     what="the deferring Dag to be known")  # fmt: skip
        yield standalone, descendants(standalone), url, marks
    finally:
        kill_if_running(standalone)


def test_standalones_tree_forks_from_two_servers_one_with_the_database_one_without(
    start_method, home, tmp_path
):
    """Under forkserver the whole tree forks from two servers standalone started: one
    for those that run user code, standalone's child, and one forked from it for the
    processes that hold an engine. A process that launches children does so through a
    server of its own forked from one of the two (named after it), never through an
    interpreter of its own."""
    skip_unless_servers_are_named(start_method)
    with standalone_holding_a_task(home, start_method, tmp_path, grace="3", defer=True) as held:
        standalone, _, _, marks = held
        # The triggerer starts a runner once the deferred task's trigger waits; that
        # task's process has left by then, or leaves a moment later.
        wait_for(lambda: "trigger-runner" in map(role_of, descendants(standalone))
                 and list(map(role_of, descendants(standalone))).count("task") == 1,
                 what="the trigger runner, and the held task alone running")  # fmt: skip
        # Its own children: the user server (and multiprocessing's resource tracker).
        roots = [p for p in psutil.Process(standalone.pid).children() if runs_a_server(p)]
        # Forked from that one: the database server, which forked the scheduler.
        forked = [
            p for root in roots for p in root.children()
            if runs_a_server(p) and "scheduler" in forked_roles(p)
        ]  # fmt: skip
        parents = [server.ppid() for server in roots + forked]
        user, database = (forked_roles(server) for server in roots + forked)
        # Any other process of the tree that runs a server is one of a launcher's own.
        stray = [
            p for p in descendants(standalone)
            if p not in roots + forked and runs_a_server(p) and not role_of(p).startswith("fs-")
        ]  # fmt: skip
        (marks / "open").touch()
    assert parents == [standalone.pid, roots[0].pid]
    assert {role for role in database if not role.startswith("fs-")} == {
        "dag-processor", "scheduler", "triggerer"
    }  # fmt: skip
    # Each launcher's own server, and what it forked: two workers (the held task's, and
    # the deferred one's, idle now), one task.
    assert database["fs-scheduler"] == ["executor-worker", "executor-worker"]
    assert user["fs-executor-worker"] == ["task"]
    assert user["fs-triggerer"] == ["trigger-runner"]
    assert stray == []


def test_the_dag_processors_own_server_leaves_between_passes(start_method, home, tmp_path):
    """Under forkserver the Dag processor forks its parsers from a server of its own:
    once a pass is over, no parser runs and that server leaves too (an idle tree holds
    neither), and the next pass that parses forks another from the shared one."""
    skip_unless_servers_are_named(start_method)
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    harness.write_dags(dags, marks)
    url = f"sqlite:///{(tmp_path / 'standalone.db').as_posix()}"
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false")
    assert spawnflow("db", "migrate", env=env).returncode == 0

    def known(dag_id: str) -> bool:
        return dag_id in spawnflow("dags", "list", env=env).stdout

    def own_server_of(pid: int) -> list[psutil.Process]:
        return [p for p in descendants(standalone) if role_of(p) == f"fs-{pid}"]

    standalone = start("standalone", env=env)
    try:
        wait_for(lambda: known("held"), what="the Dags to be parsed")
        processor = [p for p in descendants(standalone) if role_of(p) == "dag-processor"]
        wait_for(lambda: not own_server_of(processor[0].pid),
                 what="the Dag processor's own server to leave after its pass")  # fmt: skip
        (dags / "added.py").write_text(
            "from spawnflow import Dag, task\n\n\n@task\ndef noop():\n    pass\n\n\n"
            'with Dag("added"):\n    noop()\n'
        )
        wait_for(lambda: known("added"), what="the next pass to parse a new file")
    finally:
        kill_if_running(standalone)


def test_the_triggerers_own_server_leaves_with_its_idle_runner(start_method, home, tmp_path):
    """Under forkserver the triggerer forks its runner from a server of its own; once
    the runner has run no trigger for [triggerer] runner_idle_timeout, both leave (an
    idle tree holds neither)."""
    skip_unless_servers_are_named(start_method)
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    harness.write_dags(dags, marks)
    (dags / "defers.py").write_text(DEFERS.format(gate=str(marks / "open")))
    marks.mkdir(exist_ok=True)
    (marks / "open").touch()  # the trigger fires as soon as it runs
    url = f"sqlite:///{(tmp_path / 'standalone.db').as_posix()}"
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                      SPAWNFLOW__TRIGGERER__RUNNER_IDLE_TIMEOUT="1")  # fmt: skip
    assert spawnflow("db", "migrate", env=env).returncode == 0
    log = home / "logs" / "triggerer.log"
    standalone = start("standalone", env=env)
    try:
        wait_for(lambda: spawnflow("dags", "trigger", "defers", env=env).returncode == 0,
                 what="the deferring Dag to be known")  # fmt: skip
        wait_for(lambda: query(url, "SELECT state FROM task_instance WHERE task_id = 'defers'")
                 == [("success",)], what="the deferred task to resume and succeed")  # fmt: skip
        (triggerer,) = [p for p in descendants(standalone) if role_of(p) == "triggerer"]
        wait_for(lambda: not [p for p in descendants(standalone)
                              if role_of(p) in (f"fs-{triggerer.pid}", "trigger-runner")],
                 what="the idle runner and the triggerer's own server to leave")  # fmt: skip
    finally:
        kill_if_running(standalone)
    assert "trigger runner started" in log.read_text()  # it was there, and left


def skip_unless_servers_are_named(start_method: str) -> None:
    if start_method != "forkserver":
        pytest.skip("only the forkserver start method has servers")
    if not platforms.current().parent_death_signal:
        pytest.skip("only Linux names each launcher's own server after it")


def runs_a_server(process: psutil.Process) -> bool:
    """Whether ``process`` runs a forkserver's loop (its children inherit its command
    line, not its name)."""
    try:
        return role_of(process).startswith(("python", "fs-")) and (
            "multiprocessing.forkserver" in " ".join(process.cmdline())
        )
    except psutil.Error:
        return False


def forked_roles(server: psutil.Process) -> dict[str, object]:
    """What a shared server forked by role; the servers of launchers (``fs-<pid>``)
    under ``fs-<the launchers' role>``, with the sorted roles of what they forked."""
    found: dict[str, object] = {}
    for process in server.children():
        role = role_of(process)
        if role.startswith("fs-") and role[3:].isdigit():
            key = f"fs-{role_of(int(role[3:]))}"
            before = found.get(key)
            forked = [r for r in map(role_of, process.children()) if r != "gone"]
            found[key] = sorted((before if isinstance(before, list) else []) + forked)
        elif role != "gone" and not role.startswith("python"):
            # (A child forked this instant is named after its role a moment later.)
            found[role] = True
    return found


def role_of(process: psutil.Process | int) -> str:
    """A spawnflow child's role: its process name on Linux ("gone" once it left)."""
    pid = process if isinstance(process, int) else process.pid
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "gone"


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
@pytest.mark.parametrize("finishes", [True, False], ids=["task-finishes", "task-stopped"])
def test_standalone_stopped_warm_leaves_no_process_behind(
    finishes, how, start_method, home, tmp_path
):
    """A warm stop lets a running task finish within the grace period; one that does
    not finish is stopped, with the reason recorded, before the tree is gone.

    On a Windows console Ctrl-C reaches every process of the tree: only the top-level
    command may act on it, or the running task would be failed at once."""
    if how == "sigterm" and not POSIX:
        pytest.skip("a Windows process gets no SIGTERM from another: os.kill terminates it")
    with standalone_holding_a_task(home, start_method, tmp_path, grace="10") as held:
        standalone, family, url, marks = held
        assert len(family) >= 4  # processor, scheduler, a worker, a task process at least

        if how == "sigterm":
            standalone.send_signal(signal.SIGTERM)
        else:
            press_ctrl_c(standalone)
        if finishes:
            (marks / "open").touch()
        _out, err = standalone.communicate(timeout=120)
    # As shells report a command a signal stopped: 128 + SIGINT or SIGTERM.
    assert standalone.returncode == (130 if how == "ctrl-c" else 143), err
    assert "Traceback" not in err
    assert all_gone(family), [p for p in family if p.is_running()]
    hold = query(url, "SELECT state, reason FROM task_instance WHERE task_id = 'hold'")
    if finishes:
        assert hold == [("success", None)]
        assert (marks / "held").read_text() == "done\n"
    else:
        assert hold == [("failed", "stopped because spawnflow shut down before the task finished")]


def test_a_second_ctrl_c_right_after_the_first_stops_standalone_at_once(
    start_method, home, tmp_path
):
    """However soon the second Ctrl-C follows the first, the stop is cold; the task it
    cut short is queued again at once with the reason, its try not counted."""
    # A warm stop would give the held task ten minutes: only a cold one ends in time.
    with standalone_holding_a_task(home, start_method, tmp_path, grace="600") as held:
        standalone, family, url, marks = held
        press_ctrl_c(standalone)
        time.sleep(0.1)  # the gap between the two presses: the fault this test injects
        press_ctrl_c(standalone)
        out, err = standalone.communicate(timeout=120)
    assert standalone.returncode == 130, err
    assert "stopped in" in out
    assert "Traceback" not in err
    assert all_gone(family), [p for p in family if p.is_running()]
    assert not (marks / "held").exists()  # stopped, not finished
    hold = query(url, "SELECT state, try_number, reason FROM task_instance "
                      "WHERE task_id = 'hold'")  # fmt: skip
    assert hold == [
        ("scheduled", 0, "standalone was stopped cold before the task finished; queued again")
    ]


def test_a_second_ctrl_c_stops_the_scheduler_at_once_and_queues_its_task_again(
    start_method, home, tmp_path
):
    """``spawnflow scheduler`` alone, as a user runs it beside a Dag processor."""
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    harness.write_dags(dags, marks)
    url = f"sqlite:///{(tmp_path / 'scheduler.db').as_posix()}"
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                      SPAWNFLOW__CORE__STOP_GRACE_PERIOD="600")  # fmt: skip
    assert spawnflow("db", "migrate", env=env).returncode == 0
    assert spawnflow("dag-processor", "--once", env=env).returncode == 0
    assert spawnflow("dags", "trigger", "held", env=env).returncode == 0
    scheduler = start("scheduler", env=env)
    family = []
    try:
        wait_for(lambda: (marks / "hold-started").exists(), what="the held task to run")
        family = descendants(scheduler)
        press_ctrl_c(scheduler)
        time.sleep(0.1)  # the gap between the two presses: the fault this test injects
        press_ctrl_c(scheduler)
        try:
            _, err = scheduler.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            err = kill_if_running(scheduler)
            logs = [f"--- {path.name}\n{path.read_text()[-4000:]}"
                    for path in sorted((home / "logs").rglob("*.log"))]  # fmt: skip
            pytest.fail("the scheduler did not stop within 120 s of two Ctrl-Cs; its stderr:\n"
                        + err + "\n".join(logs))  # fmt: skip
    finally:
        kill_if_running(scheduler)
    assert scheduler.returncode == 130, err
    assert "Traceback" not in err
    assert all_gone(family), [p for p in family if p.is_running()]
    assert not (marks / "held").exists()
    hold = query(url, "SELECT state, try_number, reason FROM task_instance "
                      "WHERE task_id = 'hold'")  # fmt: skip
    assert hold == [("scheduled", 0, "its scheduler stopped before the task finished "
                     "(a cold stop); queued again")], err  # fmt: skip


def test_a_scheduler_killed_mid_run_and_restarted_loses_nothing_and_runs_nothing_twice(
    start_method, home, tmp_path
):
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    harness.write_dags(dags, marks)
    url = f"sqlite:///{(tmp_path / 'killed.db').as_posix()}"
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false")
    assert spawnflow("db", "migrate", env=env).returncode == 0
    assert spawnflow("dag-processor", "--once", env=env).returncode == 0
    assert spawnflow("dags", "trigger", "gated", env=env).returncode == 0

    first = start("scheduler", env=env)
    wait_for(lambda: query(url, "SELECT state FROM task_instance WHERE task_id = 'gate'")
             == [("running",)], what="the gate task to run")  # fmt: skip
    family = descendants(first)
    first.kill()  # SIGKILL or TerminateProcess: no clean-up of any kind
    first.communicate()
    assert all_gone(family), "the killed scheduler's workers or tasks survived it"

    (marks / "open").touch()
    second = start("scheduler", env=env)
    try:
        wait_for(lambda: query(url, "SELECT state FROM dag_run") == [("success",)],
                 timeout=180, what="the run to finish after the restart")  # fmt: skip
    finally:
        press_ctrl_c(second)
        second.communicate(timeout=60)
    for task in ("before", "gate", "after"):
        assert (marks / task).read_text().splitlines() == ["done"], task
    tries = dict(query(url, "SELECT task_id, try_number FROM task_instance"))
    assert tries == {"before": 1, "gate": 2, "after": 1}


@pytest.mark.parametrize("server", ["postgres", "mysql"])
def test_two_schedulers_never_run_one_task_instance_twice(
    server, start_method, home, tmp_path, testrun_uid, worker_id
):
    url = _server_database(server, f"spawnflow_test_{testrun_uid[:10]}_{worker_id}")
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    harness.write_dags(dags, marks)
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false")
    assert spawnflow("db", "reset", "--yes", env=env).returncode == 0
    assert spawnflow("dag-processor", "--once", env=env).returncode == 0
    assert spawnflow("dags", "trigger", "wide", env=env).returncode == 0

    schedulers = [start("scheduler", env=env) for _ in range(2)]
    try:
        wait_for(lambda: query(url, "SELECT state FROM dag_run") == [("success",)],
                 timeout=180, what="the wide run to finish")  # fmt: skip
    finally:
        for scheduler in schedulers:
            press_ctrl_c(scheduler)
        for scheduler in schedulers:
            scheduler.communicate(timeout=60)
    lines = (marks / "wide").read_text().split("\n")
    tasks = [line.split()[0] for line in lines if line]
    assert sorted(tasks) == [f"t{n:02}" for n in range(20)]  # each exactly once
    tries = query(url, "SELECT try_number FROM task_instance")
    assert tries == [(1,)] * 20


def test_ctrl_break_on_a_windows_console_stops_standalone_now(start_method, home, tmp_path):
    """Ctrl-Break reaches every process on a Windows console: the children ignore it and
    the top-level command takes it as a second Ctrl-C, stopping the tree cold."""
    if not platforms.current().console_broadcast:
        pytest.skip("Ctrl-Break exists on Windows consoles only")
    # A warm stop would give the held task ten minutes: only a cold one ends in time.
    with standalone_holding_a_task(home, start_method, tmp_path, grace="600") as held:
        standalone, family, _, marks = held
        press_ctrl_break(standalone)
        out, err = standalone.communicate(timeout=120)
    # Stopped by its own hand (not killed by the signal's default action, as before):
    assert standalone.returncode == 128 + signal.SIGBREAK, err  # type: ignore[attr-defined]
    assert "stopped in" in out
    assert "Traceback" not in err
    assert all_gone(family), [p for p in family if p.is_running()]
    assert not (marks / "held").exists()  # stopped, not finished


def test_standalone_itself_loads_no_sqlalchemy_under_spawn_and_forkserver(
    start_method, home, tmp_path
):
    """The database is made ready in a child; standalone only watches its children. Under
    fork it loads what its forked components then share instead of each loading it."""
    url = f"sqlite:///{(tmp_path / 'standalone.db').as_posix()}"
    env = environment(home, start_method, url, tmp_path / "no-dags",
                      SPAWNFLOW__CORE__LOAD_EXAMPLES="false")  # fmt: skip
    code = (
        "import sys\nfrom spawnflow.commands import cli\n"
        "cli.main(['standalone', '--exit-when-idle'], prog_name='spawnflow',"
        " standalone_mode=False)\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "(migrated now)" in done.stdout
    modules = set(done.stdout.strip().splitlines()[-1].split())
    assert "alembic" not in modules
    assert ("sqlalchemy" in modules) is (start_method == "fork")


def test_standalone_gives_up_on_an_unreachable_database_in_one_sentence(start_method, home):
    url = "postgresql://postgres@127.0.0.1:1/nothing_listens_here"
    env = environment(home, start_method, url, home / "dags",
                      SPAWNFLOW__DATABASE__OUTAGE_TOLERANCE="1")  # fmt: skip

    done = spawnflow("standalone", env=env)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: The database postgresql://postgres@127.0.0.1:1/"), last
    assert "while connecting at start-up" in last


def test_a_ctrl_c_while_standalone_waits_for_the_database_stops_it_and_its_child(
    start_method, home
):
    url = "postgresql://postgres@127.0.0.1:1/nothing_listens_here"
    env = environment(home, start_method, url, home / "dags",
                      SPAWNFLOW__DATABASE__OUTAGE_TOLERANCE="600")  # fmt: skip
    standalone = start("standalone", env=env)
    family = []
    try:
        setup_log = home / "logs" / "database-setup.log"
        wait_for(lambda: setup_log.exists() and "out of reach" in setup_log.read_text(),
                 what="the set-up child to wait for the database")  # fmt: skip
        family = descendants(standalone)
        press_ctrl_c(standalone)
        _, err = standalone.communicate(timeout=120)
    finally:
        kill_if_running(standalone)
    assert standalone.returncode == 130, err
    assert "Stopped while waiting for the database." in err
    assert "Traceback" not in err
    assert all_gone(family), [p for p in family if p.is_running()]
