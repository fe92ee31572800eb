"""End-to-end task throughput and scheduling latency per start method.

Two Dags of no-op Python tasks: ``fanout`` (one root, 200 tasks after it, or
``--fanout N``: the scheduler's cost per loop should not grow with N) and
``chain`` (50 tasks one after another). For each start method, in a process of its
own with a fresh SQLite database, each Dag gets one manual run driven by the
scheduler and the local executor until it finishes. Printed per method: tasks per
second over the fan-out run, the scheduling latency from an upstream task's end to
its downstream task's start along the chain (p50, p95), and the peak RSS of the
workers and of the task processes (each task reports its own).

With ``--airflow PYTHON`` (the interpreter of a virtualenv with Apache Airflow) the
same Dags also run on Airflow's LocalExecutor (``benchmarks/airflow_runner.py``) and
the ratios are printed; Airflow's LocalExecutor needs a server database, so pass
``--database-url`` (PostgreSQL) and both systems use it.

    python benchmarks/scheduling.py [--methods fork,spawn] [--workers 4] [--fanout 800]
        [--database-url postgresql://postgres@127.0.0.1:5432/bench]
        [--airflow /tmp/airflow-venv/bin/python]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DAGS = """
from spawnflow import Dag, task
from spawnflow.bootstrap.platform import peak_rss_bytes


@task
def noop():
    return peak_rss_bytes()


with Dag("fanout", max_active_tasks=64):
    root = noop()
    for n in range({fanout}):
        root >> noop()

with Dag("chain"):
    previous = noop()
    for n in range(49):
        current = noop()
        previous >> current
        previous = current
"""


def measure(
    method: str, workers: int, url: str | None, fanout: int, loop_interval: str | None = None
) -> dict:
    """In this process: run both Dags under ``method`` and collect the figures."""
    import psutil
    from sqlalchemy import select

    from spawnflow.bootstrap import orm, platform
    from spawnflow.executors.local import LocalExecutor
    from spawnflow.models.run import DagRun, TaskInstance, XCom
    from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
    from spawnflow.processors.scheduler import runs
    from spawnflow.processors.scheduler.job import Scheduler
    from spawnflow.sdk import xcom

    home = Path(tempfile.mkdtemp(prefix="spawnflow-bench-"))
    (home / "dags").mkdir()
    (home / "dags" / "bench.py").write_text(DAGS.replace("{fanout}", str(fanout)))
    values = {
        "database.url": url or f"sqlite:///{(home / 'bench.db').as_posix()}",
        "core.dags_folder": str(home / "dags"), "core.load_examples": "false",
        "core.mp_start_method": method, "core.parallelism": "64",
        "executor.parallelism": str(workers), "executor.heartbeat_interval": "5",
        **({"scheduler.loop_interval": loop_interval} if loop_interval else {}),
    }  # fmt: skip
    from _setup import install_settings

    snapshot = install_settings(home, values)
    DagFileProcessorManager(snapshot).run(once=True)

    results: dict = {"method": method}
    worker_rss = []
    for dag_id in ("fanout", "chain"):
        with orm.session_scope() as session:
            run_id = runs.trigger_run(session, dag_id).id
        executor = LocalExecutor(snapshot)

        def sample(_summary, executor=executor) -> None:
            for worker in executor.workers:
                try:
                    worker_rss.append(psutil.Process(worker.pid).memory_info().rss)
                except psutil.Error:
                    pass

        def done(run_id=run_id) -> bool:
            with orm.session_scope() as session:
                return session.get(DagRun, run_id).state in ("success", "failed")

        started = time.perf_counter()
        Scheduler(snapshot, executor=executor, only_runs={run_id}, on_loop=sample).run(until=done)
        seconds = time.perf_counter() - started
        with orm.session_scope() as session:
            tis = list(
                session.scalars(select(TaskInstance).where(TaskInstance.dag_run_id == run_id))
            )
            rss = [xcom.decode(v) for v in session.scalars(
                select(XCom.value).join(TaskInstance, XCom.task_instance_id == TaskInstance.id)
                .where(TaskInstance.dag_run_id == run_id)
            )]  # fmt: skip
            state = session.get(DagRun, run_id).state
        results[dag_id] = {"seconds": seconds, "tasks": len(tis), "state": state,
                           "task_rss": max(rss) if rss else 0}  # fmt: skip
        if dag_id == "chain":
            by_id = {ti.id: ti for ti in tis}
            ordered = sorted(by_id.values(), key=lambda ti: runs.aware(ti.start_date))
            gaps = [
                (runs.aware(b.start_date) - runs.aware(a.end_date)).total_seconds()
                for a, b in itertools.pairwise(ordered)
            ]
            results["latency"] = gaps
    results["worker_rss"] = max(worker_rss) if worker_rss else 0
    results["scheduler_rss"] = platform.peak_rss_bytes()
    return results


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=None)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--fanout", type=int, default=200, help="tasks after the root")
    parser.add_argument(
        "--loop-interval",
        default=None,
        help="[scheduler] loop_interval (default: the product's default)",
    )
    parser.add_argument("--database-url", default=None, help="default: a SQLite file per run")
    parser.add_argument("--airflow", default=None, help="Python of a virtualenv with Airflow")
    parser.add_argument(
        "--airflow-database-url", default=None, help="default: --database-url + '_airflow'"
    )
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.airflow and args.fanout != 200:
        parser.error("--airflow runs Airflow's 200-task fan-out: leave --fanout at 200")
    if args.measure:
        print(
            json.dumps(
                measure(
                    args.measure, args.workers, args.database_url, args.fanout, args.loop_interval
                )
            )
        )
        return

    from spawnflow.bootstrap import startmethods

    methods = args.methods.split(",") if args.methods else list(startmethods.available())
    print(f"fanout: 1 + {args.fanout} no-op tasks; chain: 50 no-op tasks; {args.workers} workers")
    print(f"{'method':<11}{'fanout tasks/s':>15}{'chain s':>9}{'latency p50':>13}"
          f"{'p95':>8}{'worker RSS':>12}{'task RSS':>10}{'scheduler RSS':>15}")  # fmt: skip
    rates = {}
    extra = ["--database-url", args.database_url] if args.database_url else []
    if args.loop_interval:
        extra += ["--loop-interval", args.loop_interval]
    for method in methods:
        done = subprocess.run(
            [sys.executable, __file__, "--measure", method, "--workers", str(args.workers),
             "--fanout", str(args.fanout), *extra],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        r = json.loads(done.stdout.strip().splitlines()[-1])
        fan, chain, gaps = r["fanout"], r["chain"], r["latency"]
        assert fan["state"] == chain["state"] == "success", r
        task_rss = max(fan["task_rss"], chain["task_rss"])
        rates[method] = (fan["tasks"] / fan["seconds"], statistics.median(gaps))
        print(
            f"{method:<11}{fan['tasks'] / fan['seconds']:>15.1f}{chain['seconds']:>9.2f}"
            f"{statistics.median(gaps) * 1e3:>11.0f}ms{percentile(gaps, 0.95) * 1e3:>6.0f}ms"
            f"{r['worker_rss'] / 2**20:>9.1f}MiB{task_rss / 2**20:>7.1f}MiB"
            f"{r['scheduler_rss'] / 2**20:>12.1f}MiB"
        )
    if args.airflow:
        compare_with_airflow(args, rates)


def compare_with_airflow(args, rates: dict) -> None:
    """Run the same Dags on Airflow's LocalExecutor and print the ratios."""
    url = args.airflow_database_url or (args.database_url or "") + "_airflow"
    runner = Path(__file__).with_name("airflow_runner.py")
    home = tempfile.mkdtemp(prefix="airflow-bench-")
    done = subprocess.run(
        [args.airflow, str(runner), "--database-url", url, "--workers", str(args.workers),
         "--home", home],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    r = json.loads(done.stdout.strip().splitlines()[-1])
    fan, chain, gaps = r["fanout"], r["chain"], r["latency"]
    rate, latency = fan["tasks"] / fan["seconds"], statistics.median(gaps)
    print(
        f"{'airflow':<11}{rate:>15.1f}{chain['seconds']:>9.2f}{latency * 1e3:>11.0f}ms"
        f"{percentile(gaps, 0.95) * 1e3:>6.0f}ms   (Airflow {r['airflow_version']}, LocalExecutor)"
    )
    for method, (ours, our_latency) in rates.items():
        print(f"{method}: {ours / rate:.1f}x Airflow's throughput, "
              f"latency p50 {our_latency * 1e3:.0f} ms vs {latency * 1e3:.0f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
