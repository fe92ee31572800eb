"""Apache Airflow 3.x baseline for ``benchmarks/scheduling.py``: same two Dags, same figures.

Two Dags of no-op TaskFlow tasks, as on spawnflow's side: ``fanout`` (one root, 200
tasks after it, or ``--fanout N``, and a join task after all of them) and ``chain``
(50 tasks one after another). The script gives Airflow a fresh home and a freshly
reset PostgreSQL database and starts the three processes Airflow 3 needs to run a
task, each in a session of its own: ``airflow api-server`` (task processes report
their state through its execution API), ``airflow dag-processor`` (parses the Dags)
and ``airflow scheduler`` (LocalExecutor). Once both Dags are serialized it triggers
one manual run of each Dag in turn through Airflow's Python API and times it, wall
clock, from the trigger call until the run's row in ``dag_run`` is ``success`` or
``failed`` (polled every 0.1 s). For the chain run it also records the scheduling
latency: for consecutive task instances (ordered by start_date) ``start_date(next) -
end_date(previous)`` in seconds.

Settings that would otherwise make the baseline unfair are lowered: a task's
supervisor waits up to ``[workers] min_heartbeat_interval`` (5 s by default) between
heartbeats, and with 5 s many task processes held their worker for seconds after
their task had ended; here it is 1 s, and the scheduler heartbeats every second.

Run it with the interpreter of a virtualenv made with ``pip install "apache-airflow==3.*"
psycopg2-binary asyncpg`` (the database is created if it does not exist, and its tables
are dropped and recreated by ``airflow db reset``):

    /tmp/airflow-venv/bin/python benchmarks/airflow_runner.py \\
        --database-url postgresql://postgres@127.0.0.1:5432/bench_airflow \\
        --workers 4 --home /tmp/airflow-bench/home

stdout gets exactly one JSON line:

    {"fanout": {"seconds": s, "tasks": 202, "state": "success"},
     "chain": {"seconds": s, "tasks": 50, "state": "success"},
     "latency": [gap, ...], "airflow_version": "3.3.2"}

Everything else (progress, a human-readable summary) goes to stderr; each Airflow
process's own output goes to ``<home>/<process>.log``.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

DAGS = """
import pendulum
from airflow.sdk import dag, task

START = pendulum.datetime(2024, 1, 1, tz="UTC")


@task
def noop():
    pass


@dag(dag_id="fanout", schedule=None, start_date=START, catchup=False, max_active_tasks=64)
def fanout():
    leaves = [noop.override(task_id=f"leaf_{n:04d}")() for n in range({fanout})]
    noop.override(task_id="root")() >> leaves >> noop.override(task_id="join")()


@dag(dag_id="chain", schedule=None, start_date=START, catchup=False, max_active_tasks=64)
def chain():
    previous = noop.override(task_id="step_00")()
    for n in range(1, 50):
        current = noop.override(task_id=f"step_{n:02d}")()
        previous >> current
        previous = current


fanout()
chain()
"""

DAG_IDS = ("fanout", "chain")
# Started in this order and stopped in the reverse one: the scheduler stops its
# workers while the api-server still answers their task processes.
PROCESSES = ("api-server", "dag-processor", "scheduler")


def log(message: str) -> None:
    print(f"[airflow_runner {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def sqlalchemy_url(url: str) -> str:
    """postgresql://... (or postgres://...) -> postgresql+psycopg2://..."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+")[0] not in ("postgresql", "postgres"):
        sys.exit(f"--database-url must be a postgresql:// URL, got {url!r}")
    return f"postgresql+psycopg2://{rest}"


def ensure_airflow_3() -> str:
    """Airflow's version (exits if this interpreter has no Airflow 3.x), drivers installed."""
    try:
        from importlib.metadata import version

        found = version("apache-airflow")
    except ImportError:
        found = ""
    if not found.startswith("3."):
        sys.exit(f"needs Apache Airflow 3.x in {sys.executable}, found {found or 'none'}")
    # Airflow 3 opens PostgreSQL twice: psycopg2 for its ORM, asyncpg for its async engine.
    missing = [dist for module, dist in (("psycopg2", "psycopg2-binary"), ("asyncpg", "asyncpg"))
               if importlib.util.find_spec(module) is None]  # fmt: skip
    if missing:
        log(f"missing: pip install {' '.join(missing)}")
        subprocess.run([sys.executable, "-m", "pip", "install", *missing],
                       stdout=sys.stderr, check=True)  # fmt: skip
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def airflow_env(home: Path, conn: str, workers: int, port: int) -> dict[str, str]:
    """Environment for every Airflow process this script starts (and for itself)."""
    api = f"http://127.0.0.1:{port}"
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": conn,
        "AIRFLOW__DATABASE__LOAD_DEFAULT_CONNECTIONS": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # [core] parallelism is what sets the LocalExecutor's worker count: with
        # parallelism > 0 it starts exactly that many worker processes (0 would mean one
        # new process per task). It is also the scheduler's cap on queued + running task
        # instances, so Airflow has no separate "64 running, 4 workers" split.
        "AIRFLOW__CORE__PARALLELISM": str(workers),
        # Default for Dags that do not set max_active_tasks (both Dags here set 64).
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(workers),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        # The api-server on a loopback port of its own; task processes reach its
        # execution API with tokens the scheduler signs, so all share one secret.
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": api,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),  # HS512 wants >= 64 bytes
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        # A task's supervisor heartbeats (and so may wait) at most this often; 5 s by
        # default, which kept finished tasks' workers busy.
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
        # Short scheduler loop: heartbeat every second, sleep at most 50 ms when a loop
        # found nothing to do (the scheduler does not sleep at all while it has work);
        # the Dag processor lists the folder and re-parses files every 5 s.
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.05",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    }


def prepare_database(conn: str, env: dict[str, str]) -> None:
    """Create the database if it is missing, then drop and recreate Airflow's tables."""
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    url = make_url(conn)
    admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        exists = c.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"),
                           {"n": url.database}).scalar()  # fmt: skip
        if not exists:
            log(f"creating database {url.database}")
            c.execute(sa.text(f'CREATE DATABASE "{url.database}"'))
    admin.dispose()
    log("airflow db reset -y")
    subprocess.run([sys.executable, "-m", "airflow", "db", "reset", "-y"],
                   env=env, stdout=sys.stderr, check=True)  # fmt: skip


class Airflow:
    """The api-server, Dag processor and scheduler, each a process group of its own."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env
        self.processes: dict[str, subprocess.Popen] = {}

    def launch(self, name: str) -> None:
        with open(self.home / f"{name}.log", "wb") as output:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "airflow", name], env=self.env,
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        log(f"started airflow {name} (pid {self.processes[name].pid}), output in {name}.log")

    def check_alive(self, what: str) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"airflow {name} exited ({process.returncode}) {what}; see {name}.log"
                )

    def wait_until(self, what: str, check, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            self.check_alive(f"before {what}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM each process, latest first; SIGKILL a group still there 30 s later."""
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    log(f"airflow {name} still running 30 s after SIGTERM: SIGKILL")
                    process.kill()
                    process.wait()
            # Each ran in a session of its own: its workers and task processes too.
            try:
                os.killpg(process.pid, signal.SIGKILL)
                log(f"killed what airflow {name} left behind")
            except ProcessLookupError:
                pass
            log(f"airflow {name} stopped ({process.returncode})")


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True,
                        help="postgresql://user@host:port/db (created if missing)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=4, help="LocalExecutor workers")
    parser.add_argument("--fanout", type=int, default=200, help="tasks between root and join")
    parser.add_argument("--home", type=Path, default=Path("/tmp/airflow-bench/home"),
                        help="AIRFLOW_HOME; wiped at start")  # fmt: skip
    parser.add_argument("--parse-timeout", type=float, default=600)
    parser.add_argument("--run-timeout", type=float, default=1800)
    args = parser.parse_args()

    # Keep stdout for the one JSON line: fd 1 (ours and our children's) now goes to
    # stderr, and the result is written to a saved duplicate of the original stdout.
    result_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    version = ensure_airflow_3()
    import sqlalchemy as sa

    home = args.home.resolve()
    shutil.rmtree(home, ignore_errors=True)
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "bench_dags.py").write_text(DAGS.replace("{fanout}", str(args.fanout)))
    conn = sqlalchemy_url(args.database_url)
    port = free_port()
    os.environ.update(airflow_env(home, conn, args.workers, port))  # before importing airflow
    env = dict(os.environ)
    prepare_database(conn, env)

    engine = sa.create_engine(conn)

    def scalar(sql: str, **params):
        with engine.connect() as c:
            return c.execute(sa.text(sql), params).scalar()

    airflow = Airflow(home, env)
    try:
        airflow.launch("api-server")
        airflow.wait_until("the api-server to answer",
                           lambda: answers(f"http://127.0.0.1:{port}/execution/health"),
                           args.parse_timeout)  # fmt: skip
        airflow.launch("dag-processor")
        airflow.launch("scheduler")
        airflow.wait_until("the scheduler job to heartbeat", lambda: scalar(
            "SELECT count(*) FROM job WHERE job_type = 'SchedulerJob' AND state = 'running'"
        ), args.parse_timeout)  # fmt: skip
        airflow.wait_until("both Dags to be parsed", lambda: scalar(
            "SELECT count(*) FROM serialized_dag s JOIN dag d ON d.dag_id = s.dag_id"
            " WHERE s.dag_id IN ('fanout', 'chain') AND NOT d.is_stale AND NOT d.is_paused"
        ) == len(DAG_IDS), args.parse_timeout)  # fmt: skip
        log("both Dags parsed")

        from airflow.api.common.trigger_dag import trigger_dag
        from airflow.utils.types import DagRunTriggeredByType

        results: dict = {}
        for dag_id in DAG_IDS:
            run_id = f"bench_{dag_id}"
            started = time.perf_counter()
            trigger_dag(dag_id, run_id=run_id, triggered_by=DagRunTriggeredByType.CLI,
                        replace_microseconds=False)  # fmt: skip
            while True:
                state = scalar("SELECT state FROM dag_run WHERE dag_id = :d AND run_id = :r",
                               d=dag_id, r=run_id)  # fmt: skip
                if state in ("success", "failed"):
                    break
                airflow.check_alive("mid-run")
                if time.perf_counter() - started > args.run_timeout:
                    raise TimeoutError(f"{dag_id} run still {state} after {args.run_timeout} s")
                time.sleep(0.1)
            seconds = time.perf_counter() - started
            tasks = scalar("SELECT count(*) FROM task_instance WHERE dag_id = :d AND run_id = :r",
                           d=dag_id, r=run_id)  # fmt: skip
            results[dag_id] = {"seconds": seconds, "tasks": tasks, "state": state}
            log(f"{dag_id}: {state} in {seconds:.2f} s ({tasks} tasks)")

        with engine.connect() as c:
            rows = c.execute(sa.text(
                "SELECT start_date, end_date FROM task_instance"
                " WHERE dag_id = 'chain' AND run_id = 'bench_chain' ORDER BY start_date"
            )).all()  # fmt: skip
        results["latency"] = [
            (b.start_date - a.end_date).total_seconds() for a, b in itertools.pairwise(rows)
        ]
        results["airflow_version"] = version
    finally:
        airflow.stop()
        engine.dispose()

    fan, chain, gaps = results["fanout"], results["chain"], results["latency"]
    log(f"fanout {fan['tasks'] / fan['seconds']:.1f} tasks/s, chain {chain['seconds']:.2f} s, "
        f"latency p50 {statistics.median(gaps) * 1e3:.0f} ms "
        f"p95 {percentile(gaps, 0.95) * 1e3:.0f} ms")  # fmt: skip
    print(json.dumps(results), file=result_out, flush=True)


if __name__ == "__main__":
    main()
