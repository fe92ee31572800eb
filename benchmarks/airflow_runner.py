"""Apache Airflow baseline for ``benchmarks/scheduling.py``: same two Dags, same figures.

Two Dags of no-op TaskFlow tasks: ``fanout`` (one root, 200 tasks after it) and
``chain`` (50 tasks one after another). The script gives Airflow a fresh home and a
freshly reset PostgreSQL database, starts ``airflow scheduler`` (LocalExecutor, which
also parses the Dags), waits until both Dags are serialized, then triggers one manual
run of each Dag in turn through Airflow's Python API and times it, wall clock, from
the trigger call until the run's row in ``dag_run`` is ``success`` or ``failed``
(polled every 0.1 s). For the chain run it also records the scheduling latency: for
consecutive task instances (ordered by start_date) ``start_date(next) -
end_date(previous)`` in seconds.

Run it with Airflow's interpreter (the database is created if it does not exist, and
its tables are dropped and recreated by ``airflow db reset``):

    /tmp/airflow-venv/bin/python benchmarks/airflow_runner.py \\
        --database-url postgresql://postgres@127.0.0.1:5432/airflow_bench \\
        --workers 4 --home /tmp/airflow-bench/home

stdout gets exactly one JSON line:

    {"fanout": {"seconds": s, "tasks": 201, "state": "success"},
     "chain": {"seconds": s, "tasks": 50, "state": "success"},
     "latency": [gap, ...], "airflow_version": "2.10.5"}

Everything else (progress, a human-readable summary) goes to stderr; the scheduler's
own output goes to ``<home>/scheduler.log``.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

DAGS = """
import pendulum
from airflow.decorators import dag, task

START = pendulum.datetime(2024, 1, 1, tz="UTC")


@task
def noop():
    pass


@dag(dag_id="fanout", schedule=None, start_date=START, catchup=False, max_active_tasks=64)
def fanout():
    root = noop.override(task_id="root")()
    root >> [noop.override(task_id=f"leaf_{n:03d}")() for n in range(200)]


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


def log(message: str) -> None:
    print(f"[airflow_runner {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def sqlalchemy_url(url: str) -> str:
    """postgresql://... (or postgres://...) -> postgresql+psycopg2://..."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+")[0] not in ("postgresql", "postgres"):
        sys.exit(f"--database-url must be a postgresql:// URL, got {url!r}")
    return f"postgresql+psycopg2://{rest}"


def ensure_psycopg2() -> None:
    if importlib.util.find_spec("psycopg2") is None:
        log("psycopg2 missing: pip install psycopg2-binary")
        subprocess.run([sys.executable, "-m", "pip", "install", "psycopg2-binary"],
                       stdout=sys.stderr, check=True)  # fmt: skip


def airflow_env(home: Path, conn: str, workers: int) -> dict[str, str]:
    """Environment for every Airflow process this script starts (and for itself)."""
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
        # Short scheduler loop: heartbeat every second, sleep at most 50 ms when a loop
        # found nothing to do (the scheduler does not sleep at all while it has work),
        # re-parse Dag files every 5 s and list the Dags folder every 5 s.
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.05",
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__DAG_DIR_LIST_INTERVAL": "5",
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


def wait_until(what: str, check, timeout: float, scheduler: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if scheduler.poll() is not None:
            raise RuntimeError(f"scheduler exited ({scheduler.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def stop(scheduler: subprocess.Popen) -> None:
    """SIGTERM the scheduler, SIGKILL its process group if it is not gone in 30 s."""
    if scheduler.poll() is None:
        log(f"stopping scheduler (pid {scheduler.pid}) with SIGTERM")
        scheduler.send_signal(signal.SIGTERM)
        try:
            scheduler.wait(30)
        except subprocess.TimeoutExpired:
            log("scheduler still running after 30 s: SIGKILL")
            os.killpg(scheduler.pid, signal.SIGKILL)
            scheduler.wait()
    # The scheduler ran in a session of its own; reap anything it left behind.
    try:
        os.killpg(scheduler.pid, signal.SIGKILL)
        log("killed processes the scheduler left behind")
    except ProcessLookupError:
        pass


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True,
                        help="postgresql://user@host:port/db (created if missing)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=4, help="LocalExecutor workers")
    parser.add_argument("--home", type=Path, default=Path("/tmp/airflow-bench/home"),
                        help="AIRFLOW_HOME; wiped at start")  # fmt: skip
    parser.add_argument("--parse-timeout", type=float, default=600)
    parser.add_argument("--run-timeout", type=float, default=1800)
    args = parser.parse_args()

    # Keep stdout for the one JSON line: fd 1 (ours and our children's) now goes to
    # stderr, and the result is written to a saved duplicate of the original stdout.
    result_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    ensure_psycopg2()
    import sqlalchemy as sa

    home = args.home.resolve()
    shutil.rmtree(home, ignore_errors=True)
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "bench_dags.py").write_text(DAGS)
    conn = sqlalchemy_url(args.database_url)
    env = airflow_env(home, conn, args.workers)
    os.environ.update(env)  # before this process imports airflow (to trigger runs)
    env = dict(os.environ)
    prepare_database(conn, env)

    engine = sa.create_engine(conn)

    def scalar(sql: str, **params):
        with engine.connect() as c:
            return c.execute(sa.text(sql), params).scalar()

    scheduler_log = open(home / "scheduler.log", "wb")  # noqa: SIM115 - closed after the scheduler
    log(f"starting airflow scheduler, output in {home / 'scheduler.log'}")
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "airflow", "scheduler"], env=env, stdin=subprocess.DEVNULL,
        stdout=scheduler_log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until("the scheduler job to heartbeat", lambda: scalar(
            "SELECT count(*) FROM job WHERE job_type = 'SchedulerJob' AND state = 'running'"
        ), args.parse_timeout, scheduler)  # fmt: skip
        wait_until("both Dags to be parsed", lambda: scalar(
            "SELECT count(*) FROM serialized_dag s JOIN dag d ON d.dag_id = s.dag_id"
            " WHERE s.dag_id IN ('fanout', 'chain') AND d.is_active AND NOT d.is_paused"
        ) == len(DAG_IDS), args.parse_timeout, scheduler)  # fmt: skip
        log("both Dags parsed")

        import airflow
        from airflow.api.common.trigger_dag import trigger_dag

        results: dict = {}
        for dag_id in DAG_IDS:
            run_id = f"bench_{dag_id}"
            started = time.perf_counter()
            trigger_dag(dag_id, run_id=run_id, replace_microseconds=False)
            while True:
                state = scalar("SELECT state FROM dag_run WHERE dag_id = :d AND run_id = :r",
                               d=dag_id, r=run_id)  # fmt: skip
                if state in ("success", "failed"):
                    break
                if scheduler.poll() is not None:
                    raise RuntimeError(f"scheduler exited ({scheduler.returncode}) mid-run")
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
        results["airflow_version"] = airflow.__version__
    finally:
        stop(scheduler)
        scheduler_log.close()
        engine.dispose()

    fan, chain, gaps = results["fanout"], results["chain"], results["latency"]
    log(f"fanout {fan['tasks'] / fan['seconds']:.1f} tasks/s, chain {chain['seconds']:.2f} s, "
        f"latency p50 {statistics.median(gaps) * 1e3:.0f} ms "
        f"p95 {percentile(gaps, 0.95) * 1e3:.0f} ms")  # fmt: skip
    print(json.dumps(results), file=result_out, flush=True)


if __name__ == "__main__":
    main()
