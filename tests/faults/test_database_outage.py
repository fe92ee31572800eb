"""A database that goes away and comes back: the run finishes, nothing runs twice.

The database server sits behind a TCP proxy the test cuts: every connection is closed
and new ones are refused, as in a restart, a failover or a network blip.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import sqlalchemy as sa

from spawnflow.bootstrap import orm
from tests.conftest import SERVER_URLS, _server_database
from tests.faults.proxy import TcpProxy
from tests.oskit import press_ctrl_c, start_in_console
from tests.scheduler.test_e2e import (
    all_gone,
    descendants,
    environment,
    query,
    spawnflow,
    start,
    wait_for,
)  # fmt: skip

pytestmark = pytest.mark.process

#: Twelve tasks of a second each; each writes its own marker file, once per run of it.
DAGS = """
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from spawnflow import Dag, task

MARKS = Path({marks!r})

with Dag("outage", default_args={{"retries": 2, "retry_delay": 0}}, max_active_tasks=4):
    for n in range(12):
        @task(task_id=f"t{{n:02}}")
        def work(n=n):
            time.sleep(1)
            with open(MARKS / f"t{{n:02}}", "a") as marker:
                marker.write("ran\\n")

        work()
"""


@pytest.fixture(params=["postgres", "mysql"])
def behind_a_proxy(request, testrun_uid, worker_id, tmp_path, home, start_method):
    """(environment, URL through the proxy, the proxy, marks folder) for a fresh database."""
    backend = request.param
    direct = _server_database(backend, f"spawnflow_test_{testrun_uid[:10]}_{worker_id}")
    server = sa.make_url(SERVER_URLS[backend])
    with TcpProxy(server.host or "127.0.0.1", server.port or 0) as proxy:
        url = sa.make_url(direct).set(host="127.0.0.1", port=proxy.port)
        url_text = url.render_as_string(hide_password=False)
        marks, dags = tmp_path / "marks", tmp_path / "dags"
        marks.mkdir()
        dags.mkdir()
        (dags / "outage.py").write_text(DAGS.format(marks=str(marks)))
        env = environment(home, start_method, url_text, dags,
                          SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                          SPAWNFLOW__EXECUTOR__PARALLELISM="4")  # fmt: skip
        assert spawnflow("db", "reset", "--yes", env=env).returncode == 0
        assert spawnflow("dag-processor", "--once", env=env).returncode == 0
        yield env, url_text, proxy, marks


def markers(marks: Path) -> dict[str, int]:
    return {p.name: len(p.read_text().splitlines()) for p in sorted(marks.iterdir())}


class Run:
    """A ``scheduler --exit-when-idle`` and, once it ended, its stderr."""

    def __init__(self, env: dict[str, str]):
        self.process = start("scheduler", "--exit-when-idle", env=env)
        self.err = ""


@contextmanager
def scheduler_until_idle(env: dict[str, str]) -> Iterator[Run]:
    """Start a scheduler that exits when idle. After the block it must end by itself,
    exit code 0, no traceback; if the block fails, it is stopped."""
    run = Run(env)
    try:
        yield run
        out, run.err = run.process.communicate(timeout=300)
    finally:
        if run.process.poll() is None:
            press_ctrl_c(run.process)
            run.process.communicate(timeout=60)
    assert run.process.returncode == 0, run.err
    assert "Traceback" not in out + run.err


def each_task_ran_once(url: str, marks: Path) -> None:
    """Every task of the outage Dag wrote its marker once, and succeeded in its first try."""
    states = query(url, "SELECT task_id, state, try_number, reason FROM task_instance "
                   "ORDER BY task_id")  # fmt: skip
    assert markers(marks) == {f"t{n:02}": 1 for n in range(12)}, states
    assert states == [(f"t{n:02}", "success", 1, None) for n in range(12)]


def test_a_scheduler_rides_out_an_outage_and_runs_each_task_once(behind_a_proxy):
    env, url, proxy, marks = behind_a_proxy
    assert spawnflow("dags", "trigger", "outage", env=env).returncode == 0
    with scheduler_until_idle(env) as run:
        # Tasks have finished and others run (their supervisors write as the link drops).
        wait_for(lambda: len(list(marks.iterdir())) >= 3, what="the first tasks to finish")
        proxy.cut()
        time.sleep(5)  # the outage itself: what the test injects, not a wait for a result
        proxy.restore()
    assert "database out of reach" in run.err
    assert "database reachable again" in run.err
    each_task_ran_once(url, marks)


def test_commits_whose_answers_are_lost_run_each_task_once(behind_a_proxy, home):
    """The server commits, the connection drops before the client hears so: the write
    runs again and must recognise itself (a task queued but never handed over, a try
    marked running by its own worker, an outcome already written)."""
    env, url, proxy, marks = behind_a_proxy
    assert spawnflow("dags", "trigger", "outage", env=env).returncode == 0
    # Two of each write that must recognise itself: the scheduler queueing a task (it
    # hands the task to its executor only after the commit), a worker marking its try
    # running, a worker recording how the try ended.
    for write in (b"queued_at=", b"worker_pid=", b"duration="):
        proxy.lose_commit_answers(after=write, count=2)
    with scheduler_until_idle(env):
        pass  # it runs the Dag to its end
    logs = "".join(_text(path) for path in sorted((home / "logs").rglob("*.log")))
    assert "Traceback" not in logs
    assert proxy.answers_lost == 6
    each_task_ran_once(url, marks)


def stopped_in_an_outage(
    command: str, env: dict[str, str], proxy: TcpProxy, log_file: Path, working=None
) -> tuple[int | None, str, list[psutil.Process]]:
    """Start ``command`` with an hour's outage tolerance, wait until ``working()``, cut
    the database off (before the start if there is no ``working``), and press Ctrl-C
    once the command logged the outage: its exit code, its stderr, and its descendants
    as they were before the cut."""
    if working is None:
        proxy.cut()
    # Started as a shell without job control starts a background command, SIGINT ignored
    # (Python then raises no KeyboardInterrupt): only spawnflow's own handling stops it.
    process = start_in_console(
        [sys.executable, "-m", "spawnflow", command],
        env={**env, "SPAWNFLOW__DATABASE__OUTAGE_TOLERANCE": "3600"},
        text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    family = []
    try:
        if working is not None:
            wait_for(working, what=f"the {command} to work")
            family = descendants(process)
            proxy.cut()
        wait_for(lambda: "database out of reach" in _text(log_file),
                 what=f"the {command} to meet the outage")  # fmt: skip
        press_ctrl_c(process)
        _, err = process.communicate(timeout=120)
    finally:
        proxy.restore()
        if process.poll() is None:
            press_ctrl_c(process)
            process.communicate(timeout=60)
    return process.returncode, err, family


def test_a_stop_during_an_outage_ends_the_scheduler_without_waiting_for_the_database(
    behind_a_proxy, home
):
    """Ctrl-C while the database is away: the scheduler stops within its grace period,
    not once the database is back or its outage tolerance (an hour here) has passed."""
    env, _, proxy, marks = behind_a_proxy
    assert spawnflow("dags", "trigger", "outage", env=env).returncode == 0
    code, err, family = stopped_in_an_outage(
        "scheduler", env, proxy, home / "logs" / "scheduler.log",
        working=lambda: len(list(marks.iterdir())) >= 1,  # a first task finished
    )  # fmt: skip
    assert code == 130, err
    assert "waits_at_most_s=" in err  # the user sees the stop taken ("stopping ...")
    assert "Traceback" not in err
    assert all_gone(family), [p for p in family if p.is_running()]


# One server: what differs between the two is how a lost connection reads, which the
# scheduler's tests cover; the start-up wait is one function for every command.
@pytest.mark.parametrize("behind_a_proxy", ["postgres"], indirect=True)
@pytest.mark.parametrize(
    ("command", "at_start"),
    [("dag-processor", False), ("triggerer", False), ("dag-processor", True)],
    ids=["dag-processor", "triggerer", "at-start"],
)
def test_a_stop_during_an_outage_ends_the_other_components_too(
    behind_a_proxy, home, command, at_start
):
    """The Dag processor and the triggerer, met by the outage while they work, or a
    command met by it while it waits for the database at start-up."""
    env, _, proxy, _ = behind_a_proxy
    log_file = home / "logs" / f"{command}.log"
    # The fixture's `dag-processor --once` wrote a pass to the log already.
    line, count = ("pass finished", 2) if command == "dag-processor" else ("registered", 1)
    code, err, family = stopped_in_an_outage(
        command, env, proxy, log_file,
        working=None if at_start else lambda: _text(log_file).count(line) >= count,
    )  # fmt: skip
    assert code == 130, err
    assert "Traceback" not in err
    assert all_gone(family), [p for p in family if p.is_running()]


def test_an_outage_past_its_tolerance_ends_the_scheduler_in_one_sentence(behind_a_proxy):
    env, _, proxy, marks = behind_a_proxy
    assert spawnflow("dags", "trigger", "outage", env=env).returncode == 0
    proxy.cut()
    stopped = spawnflow("scheduler", env={**env, "SPAWNFLOW__DATABASE__OUTAGE_TOLERANCE": "3"})
    proxy.restore()

    assert stopped.returncode == 1
    assert "Traceback" not in stopped.stdout + stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: The database "), last
    assert "was out of reach for 3 s" in last
    assert "[database] outage_tolerance is 3 s" in last
    # A scheduler started once the database is back runs the whole run, each task once.
    again = start("scheduler", "--exit-when-idle", env=env)
    family = []
    try:
        _, err = again.communicate(timeout=300)
    finally:
        if again.poll() is None:
            family = descendants(again)
            press_ctrl_c(again)
            again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert all_gone(family)
    assert markers(marks) == {f"t{n:02}": 1 for n in range(12)}


#: A Dag file whose parse waits for the test: it says it started, then waits for a gate.
SLOW_DAG = """
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MARKS = Path({marks!r})
(MARKS.parent / "parsing").touch()
while not (MARKS.parent / "gate").exists():
    time.sleep(0.05)

from spawnflow import Dag, task

with Dag("stored_after_an_outage"):
    @task
    def noop():
        pass

    noop()
"""


def test_the_dag_processor_stores_a_file_parsed_during_an_outage(behind_a_proxy, home):
    env, url, proxy, marks = behind_a_proxy
    dags = Path(env["SPAWNFLOW__CORE__DAGS_FOLDER"])
    log_file = home / "logs" / "dag-processor.log"
    processor = start("dag-processor", env=env)
    try:
        (dags / "slow.py").write_text(SLOW_DAG.format(marks=str(marks)))
        wait_for((marks.parent / "parsing").exists, what="the parse of slow.py to start")
        proxy.cut()
        (marks.parent / "gate").touch()
        # The parse ends while the database is away: its Dags wait in the manager.
        wait_for(lambda: "storing the Dags of" in _text(log_file),
                 what="the manager to meet the outage while storing")  # fmt: skip
        proxy.restore()
        wait_for(lambda: query(url, "SELECT dag_id FROM dag WHERE dag_id = "
                                    "'stored_after_an_outage'") != [],
                 what="the Dag to be stored")  # fmt: skip
    finally:
        proxy.restore()
        press_ctrl_c(processor)
        out, err = processor.communicate(timeout=120)
    assert processor.returncode == 130, err
    assert "Traceback" not in out + err
    assert "database out of reach" in err
    assert "database reachable again" in _text(log_file)


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_pooled_connections_the_outage_closed_are_replaced_without_an_error(
    backend, testrun_uid, worker_id, make_settings
):
    """After the database is back, the next unit of work runs at its first attempt: the
    pool tests a connection before lending it (pre-ping) and replaces a dead one."""
    direct = _server_database(backend, f"spawnflow_test_{testrun_uid[:10]}_{worker_id}")
    server = sa.make_url(SERVER_URLS[backend])
    with TcpProxy(server.host or "127.0.0.1", server.port or 0) as proxy:
        url = sa.make_url(direct).set(host="127.0.0.1", port=proxy.port)
        url_text = url.render_as_string(hide_password=False)
        make_settings(**{"database.url": url_text})
        with orm.session_scope(url_text) as session:  # a connection now waits in the pool
            assert session.execute(sa.text("SELECT 1")).scalar() == 1
        pooled = proxy.connections
        proxy.cut()
        proxy.restore()
        with orm.session_scope(url_text) as session:  # no retry around it: it must work
            assert session.execute(sa.text("SELECT 2")).scalar() == 2
        assert proxy.connections == pooled + 1  # the dead one was replaced, once
        orm.dispose_all()
