"""End-to-end task throughput and scheduling latency per start method.

Two Dags of no-op Python tasks: ``fanout`` (one root, 200 tasks after it, or
``--fanout N``: the scheduler's cost per loop should not grow with N, and a join task
after all of them) and ``chain`` (50 tasks one after another). For each start method,
in a process of its own with a fresh SQLite database, each Dag gets one manual run
driven by the scheduler and the local executor until it finishes. Printed per method:
tasks per second over the fan-out run, the scheduling latency from an upstream task's
end to its downstream task's start along the chain (p50, p95), the CPU the fan-out cost
per task, and the peak RSS of the workers and of the task processes (each task reports
its own). CPU per task is the whole machine's busy time (the database server's too;
read it on a quiet machine: it shows how far the cores bound the throughput), its
kernel part, and the scheduler's own; it covers the executor's start and stop and the
benchmark's own check of the run's state after each loop.

With ``--airflow PYTHON`` (the interpreter of a virtualenv with Apache Airflow 3.x) the
same Dags also run on Airflow's LocalExecutor (``benchmarks/airflow_runner.py``) and
the ratios are printed; Airflow's LocalExecutor needs a server database, so pass
``--database-url`` (PostgreSQL): spawnflow uses it, Airflow a database of its own
(``--airflow-database-url``, by default the same name with ``_airflow`` appended).
``--rounds N`` measures every method and Airflow in turn, N times over, so that drift
on a busy machine hits each alike, and prints each round and the medians.

With ``--executor celery`` each method also runs on the Celery executor: ``--workers``
/ 2 ``spawnflow celery worker`` processes of concurrency 2 on each broker of
``--brokers`` (Redis and RabbitMQ on loopback by default), beside the local executor
with ``--workers`` workers; the ratio of each to the local executor's tasks/s is
printed. The workers and the scheduler share ``--database-url`` (PostgreSQL, as
several machines would; a SQLite file if none is given).

    python benchmarks/scheduling.py [--methods fork,spawn] [--workers 4] [--fanout 800]
        [--database-url postgresql://postgres@127.0.0.1:5432/bench]
        [--airflow /tmp/airflow-venv/bin/python] [--rounds 3]
        [--executor celery [--brokers redis://127.0.0.1:6379/0,amqp://guest:guest@127.0.0.1//]]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _setup import as_installed, summary

DAGS = """
from spawnflow import Dag, task
from spawnflow.bootstrap.platform import peak_rss_bytes


@task
def noop():
    return peak_rss_bytes()


with Dag("fanout", max_active_tasks=64):
    leaves = [noop() for n in range({fanout})]
    noop() >> leaves >> noop()

with Dag("chain"):
    previous = noop()
    for n in range(49):
        current = noop()
        previous >> current
        previous = current
"""


BROKERS = "redis://127.0.0.1:6379/0,amqp://guest:guest@127.0.0.1:5672//"


def start_celery_workers(home: Path, values: dict[str, str], count: int) -> list:
    """``count`` Celery workers of concurrency 2, each with a home of its own (a machine
    of its own), with ``values`` as their settings; once each says it is ready."""
    workers = []
    for n in range(count):
        machine = home / f"worker-{n}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
        env.update({f"SPAWNFLOW__{key.replace('.', '__').upper()}": value
                    for key, value in values.items()}, SPAWNFLOW_HOME=str(machine))  # fmt: skip
        log = machine / "logs" / "celery-worker.log"
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "spawnflow", "celery", "worker", "-c", "2",
             "-n", f"bench-{n}-{uuid.uuid4().hex[:8]}@%h"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        while not (log.exists() and " ready." in log.read_text()):
            if workers[-1].poll() is not None:
                raise SystemExit(f"celery worker {n} exited: see {log}")
            time.sleep(0.1)  # the worker writes its log; nothing else to wait on
    return workers


def measure(
    method: str,
    workers: int,
    url: str | None,
    fanout: int,
    loop_interval: str | None = None,
    broker: str | None = None,
) -> dict:
    """In this process: run both Dags under ``method`` and collect the figures; on the
    Celery executor through ``broker`` when one is given."""
    import psutil
    from sqlalchemy import select

    from spawnflow.bootstrap import orm, platform
    from spawnflow.executors.celery_executor import CeleryExecutor
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
    if broker:
        values.update({"core.executor": "celery", "celery.broker_url": broker,
                       "celery.default_queue": f"bench-{uuid.uuid4().hex[:8]}"})  # fmt: skip
    from _setup import install_settings

    snapshot = install_settings(home, values)
    DagFileProcessorManager(snapshot).run(once=True)
    celery_workers = start_celery_workers(home, values, workers // 2) if broker else []

    results: dict = {"method": method}
    worker_rss = []
    for dag_id in ("fanout", "chain"):
        with orm.session_scope() as session:
            run_id = runs.trigger_run(session, dag_id).id
        executor = CeleryExecutor(snapshot) if broker else LocalExecutor(snapshot)

        def sample(_summary, executor=executor) -> None:
            pids = [w.pid for w in (celery_workers or getattr(executor, "workers", []))]
            for pid in pids:
                try:
                    worker_rss.append(psutil.Process(pid).memory_info().rss)
                except psutil.Error:
                    pass

        def done(run_id=run_id) -> bool:
            with orm.session_scope() as session:
                return session.get(DagRun, run_id).state in ("success", "failed")

        machine, own = psutil.cpu_times(), psutil.Process().cpu_times()
        started = time.perf_counter()
        Scheduler(snapshot, executor=executor, only_runs={run_id}, on_loop=sample).run(until=done)
        seconds = time.perf_counter() - started
        cpu = cpu_spent(machine, psutil.cpu_times(), own, psutil.Process().cpu_times())
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
                           "task_rss": max(rss) if rss else 0, "cpu": cpu}  # fmt: skip
        if dag_id == "chain":
            by_id = {ti.id: ti for ti in tis}
            ordered = sorted(by_id.values(), key=lambda ti: runs.aware(ti.start_date))
            gaps = [
                (runs.aware(b.start_date) - runs.aware(a.end_date)).total_seconds()
                for a, b in itertools.pairwise(ordered)
            ]
            results["latency"] = gaps
    for worker in celery_workers:
        worker.send_signal(signal.SIGTERM)
    for worker in celery_workers:
        worker.wait(timeout=120)
    results["worker_rss"] = max(worker_rss) if worker_rss else 0
    results["scheduler_rss"] = platform.peak_rss_bytes()
    return results


def cpu_spent(machine_before: Any, machine_after: Any, own_before: Any, own_after: Any
              ) -> dict[str, float]:  # fmt: skip
    """CPU seconds between two readings of ``psutil.cpu_times()`` (the machine) and of
    ``psutil.Process().cpu_times()`` (this process, the scheduler): the machine's busy
    time, its kernel part, and ours. Busy is user, nice, system, irq and softirq, where
    the OS has them: idle and I/O wait are not work, steal is time the hypervisor gave
    elsewhere, Linux counts guest time inside user already, and Windows its interrupt
    and DPC time inside system."""
    busy = {name: getattr(machine_after, name) - getattr(machine_before, name)
            for name in ("user", "nice", "system", "irq", "softirq")
            if hasattr(machine_after, name)}  # fmt: skip
    kernel = sum(busy.get(name, 0.0) for name in ("system", "irq", "softirq"))
    own = (own_after.user - own_before.user) + (own_after.system - own_before.system)
    return {"machine": sum(busy.values()), "kernel": kernel, "scheduler": own}


#: The figures of one run, in the order :func:`row` prints them.
Figures = tuple[float, float, float, float, float, float, float]


def figures(r: dict) -> Figures:
    """Fan-out tasks/s, chain seconds, the chain's latency p50 and p95, and the fan-out's
    CPU milliseconds per task (machine, kernel, scheduler; NaN where not measured)."""
    fan, chain, gaps = r["fanout"], r["chain"], r["latency"]
    assert fan["state"] == chain["state"] == "success", r
    p50, p95 = summary(gaps)
    cpu = fan.get("cpu") or {}
    per_task = [cpu.get(k, float("nan")) * 1e3 / fan["tasks"]
                for k in ("machine", "kernel", "scheduler")]  # fmt: skip
    return (fan["tasks"] / fan["seconds"], chain["seconds"], p50, p95, *per_task)


HEADER = (f"{'method':<16}{'fanout tasks/s':>15}{'chain s':>9}{'latency p50':>13}{'p95':>8}"
          f"{'CPU ms/task':>13}{'kernel':>8}{'sched.':>8}")  # fmt: skip


def row(name: str, values: Figures) -> str:
    rate, chain, p50, p95, machine, kernel, scheduler = values
    return (f"{name:<16}{rate:>15.1f}{chain:>9.2f}{p50 * 1e3:>11.0f}ms{p95 * 1e3:>6.0f}ms"
            f"{machine:>13.1f}{kernel:>8.1f}{scheduler:>8.1f}")  # fmt: skip


def measure_in_child(args, method: str, broker: str | None = None) -> dict:
    """One ``measure`` under ``method``, in a fresh interpreter."""
    extra = ["--database-url", args.database_url] if args.database_url else []
    if args.loop_interval:
        extra += ["--loop-interval", args.loop_interval]
    if broker:
        extra += ["--broker", broker]
    done = subprocess.run(
        [sys.executable, __file__, "--measure", method, "--workers", str(args.workers),
         "--fanout", str(args.fanout), *extra],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_airflow(args) -> dict:
    """The same Dags on Airflow's LocalExecutor (``airflow_runner.py``); its progress
    goes to our stderr."""
    url = args.airflow_database_url or (args.database_url or "") + "_airflow"
    runner = Path(__file__).with_name("airflow_runner.py")
    home = tempfile.mkdtemp(prefix="airflow-bench-")
    done = subprocess.run(
        [args.airflow, str(runner), "--database-url", url, "--workers", str(args.workers),
         "--fanout", str(args.fanout), "--home", home],
        stdout=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=None)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--fanout", type=int, default=200, help="tasks between root and join")
    parser.add_argument(
        "--loop-interval",
        default=None,
        help="[scheduler] loop_interval (default: the product's default)",
    )
    parser.add_argument("--database-url", default=None, help="default: a SQLite file per run")
    parser.add_argument("--airflow", default=None, help="Python of a virtualenv with Airflow 3")
    parser.add_argument(
        "--airflow-database-url", default=None, help="default: --database-url + '_airflow'"
    )
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds; medians")
    parser.add_argument("--executor", choices=["local", "celery"], default="local",
                        help="celery: the Celery executor too, beside the local one")  # fmt: skip
    parser.add_argument("--brokers", default=BROKERS, help="for --executor celery")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--broker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    as_installed()
    if args.airflow and not (args.airflow_database_url or args.database_url):
        parser.error("--airflow needs a PostgreSQL --database-url or --airflow-database-url")
    if args.measure:
        print(
            json.dumps(
                measure(
                    args.measure,
                    args.workers,
                    args.database_url,
                    args.fanout,
                    args.loop_interval,
                    args.broker,
                )
            )
        )
        return

    from spawnflow.bootstrap import startmethods

    methods = args.methods.split(",") if args.methods else list(startmethods.available())
    print(f"fanout: 1 + {args.fanout} + 1 no-op tasks; chain: 50 no-op tasks; "
          f"{args.workers} workers; {args.rounds} round(s)", flush=True)  # fmt: skip
    print(f"{HEADER}{'worker RSS':>12}{'task RSS':>10}{'scheduler RSS':>15}")
    results: dict[str, list[Figures]] = {}
    version = None
    brokers = args.brokers.split(",") if args.executor == "celery" else []
    for _ in range(args.rounds):
        for method in methods:
            for broker in [None, *brokers]:
                name = method if broker is None else f"{method}/{broker.split(':')[0]}"
                r = measure_in_child(args, method, broker)
                results.setdefault(name, []).append(figures(r))
                task_rss = max(r["fanout"]["task_rss"], r["chain"]["task_rss"])
                print(f"{row(name, results[name][-1])}{r['worker_rss'] / 2**20:>9.1f}MiB"
                      f"{task_rss / 2**20:>7.1f}MiB{r['scheduler_rss'] / 2**20:>12.1f}MiB",
                      flush=True)  # fmt: skip
        if args.airflow:
            r = measure_airflow(args)
            version = r["airflow_version"]
            results.setdefault("airflow", []).append(figures(r))
            print(f"{row('airflow', results['airflow'][-1])}   (Airflow {version}, LocalExecutor)",
                  flush=True)  # fmt: skip
    medians = {
        name: tuple(statistics.median(column) for column in zip(*rounds, strict=True))
        for name, rounds in results.items()
    }
    if args.rounds > 1:
        print(f"\nmedians of {args.rounds} rounds\n{HEADER}")
        for name, values in medians.items():
            print(row(name, values))
    for name, (rate, *_) in medians.items():
        if "/" in name:
            local = medians[name.split("/")[0]][0]
            print(f"{name}: {rate / local:.2f}x the local executor's tasks/s "
                  f"({rate:.1f} vs {local:.1f}; {args.workers // 2} workers x 2 vs "
                  f"{args.workers} workers)")  # fmt: skip
    if args.airflow:
        rate, _, latency, *_ = medians.pop("airflow")
        for method, (ours, _, our_latency, *_) in medians.items():
            print(f"{method}: {ours / rate:.1f}x Airflow {version}'s throughput, "
                  f"latency p50 {our_latency * 1e3:.0f} ms vs {latency * 1e3:.0f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
