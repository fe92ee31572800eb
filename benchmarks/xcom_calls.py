"""XCom call latency per backend and start method, seen from a running task.

A task pushes and then pulls values of 100 B, 10 KB and 1 MB (``--calls`` of each,
each under its own key) and times every call with ``time.perf_counter``. It runs
through the real scheduler, executor worker, supervisor and, for backends other than
the database, the task's XCom helper process. Backends:

- ``database``: the default, values in the metadata database (SQLite);
- ``files-in-worker``: the objectstorage backend on local files, run in the worker
  (``in_helper = False``): the same storage work without the helper, as a baseline;
- ``files``: the objectstorage backend on local files, through the helper;
- ``s3``: the objectstorage backend on S3 (moto's server on loopback, s3fs), through
  the helper.

Printed per start method and backend: median and p95 per call for each size, the
first call's latency (for the helper backends it includes starting the helper and
loading the backend) and, for 100 B, how much the helper adds over ``database`` and
over ``files-in-worker`` (target: under 1 ms over the default backend).

    python benchmarks/xcom_calls.py [--methods fork,spawn] [--calls 50] [--no-s3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SIZES = {"100B": 100, "10KB": 10_000, "1MB": 1_000_000}

DAG = """
import json, time
from spawnflow import Dag, task, xcom_pull, xcom_push

SIZES = {sizes!r}
CALLS = {calls}

with Dag("xcom_bench"):
    @task
    def measure():
        timings = {{"first": None}}
        start = time.perf_counter()
        xcom_push("warm_up", "x")
        timings["first"] = time.perf_counter() - start
        for name, size in SIZES.items():
            value = "v" * (size - 2)  # its JSON text is `size` bytes
            pushes, pulls = [], []
            for n in range(CALLS):
                start = time.perf_counter()
                xcom_push(f"{{name}}_{{n}}", value)
                pushes.append(time.perf_counter() - start)
            for n in range(CALLS):
                start = time.perf_counter()
                got = xcom_pull("measure", f"{{name}}_{{n}}")
                pulls.append(time.perf_counter() - start)
                assert len(got) == size - 2
            timings[name] = {{"push": pushes, "pull": pulls}}
        with open({results!r}, "w") as file:
            json.dump(timings, file)

    measure()
"""

BACKENDS = {
    "database": {"core.xcom_backend": "database"},
    "files-in-worker": {"core.xcom_backend": "_xcom_backends:FilesInWorker"},
    "files": {"core.xcom_backend": "objectstorage"},
    "s3": {"core.xcom_backend": "objectstorage"},
}


def measure(method: str, backend: str, calls: int, s3_endpoint: str | None) -> dict:
    """In this process: one run of the measuring task; its timings."""
    from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
    from spawnflow.processors.scheduler.job import Scheduler
    from tests.scheduler import harness

    home = Path(tempfile.mkdtemp(prefix="spawnflow-xcom-bench-"))
    (home / "dags").mkdir()
    results = home / "results.json"
    (home / "dags" / "bench.py").write_text(
        DAG.format(sizes=SIZES, calls=calls, results=str(results))
    )
    values = {
        "database.url": f"sqlite:///{(home / 'bench.db').as_posix()}",
        "core.dags_folder": str(home / "dags"), "core.load_examples": "false",
        "core.mp_start_method": method, "core.max_xcom_size": str(4 * 2**20),
        "executor.parallelism": "1", "scheduler.loop_interval": "0.05",
        "xcom.objectstorage_path": (home / "xcoms").as_uri(), **BACKENDS[backend],
    }  # fmt: skip
    if backend == "s3":
        values["xcom.objectstorage_path"] = "s3://bench/xcoms"
        values["xcom.objectstorage_options"] = json.dumps({
            "endpoint_url": s3_endpoint, "key": "bench", "secret": "bench",
            "client_kwargs": {"region_name": "us-east-1"},
        })  # fmt: skip
    from _setup import install_settings

    snapshot = install_settings(home, values)
    DagFileProcessorManager(snapshot).run(once=True)
    run_id = harness.trigger("xcom_bench")
    check = harness.deadline(600)
    Scheduler(snapshot, only_runs={run_id}).run(until=lambda: check(run_id))
    ti = harness.task_instances(run_id)["measure"]
    if ti.state != "success":
        raise SystemExit(f"{method}/{backend}: the task ended {ti.state}: {ti.reason}")
    return json.loads(results.read_text())


def stats(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.95 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=None)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--s3-endpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    sys.path[:0] = [str(root), str(Path(__file__).parent)]
    if args.measure:
        method, backend = args.measure.split("/")
        print(json.dumps(measure(method, backend, args.calls, args.s3_endpoint)))
        return

    from spawnflow.bootstrap import startmethods

    methods = args.methods.split(",") if args.methods else list(startmethods.available())
    backends = [b for b in BACKENDS if not (args.no_s3 and b == "s3")]
    from _setup import start_s3

    server, endpoint = start_s3() if "s3" in backends else (None, None)
    print(f"{args.calls} pushes then {args.calls} pulls per size; times seen by the task")
    print(f"{'method':<11}{'backend':<16}{'first call':>11}" + "".join(
        f"{size + ' push':>16}{size + ' pull':>16}" for size in SIZES))  # fmt: skip
    try:
        for method in methods:
            medians: dict[str, float] = {}
            for backend in backends:
                done = subprocess.run(
                    [sys.executable, __file__, "--measure", f"{method}/{backend}",
                     "--calls", str(args.calls), "--s3-endpoint", endpoint or ""],
                    capture_output=True, text=True, cwd=root,
                )  # fmt: skip
                if done.returncode != 0:
                    print(f"{method:<11}{backend:<16} failed: {done.stderr.strip()[-300:]}")
                    continue
                timings = json.loads(done.stdout.strip().splitlines()[-1])
                cells = []
                for size in SIZES:
                    for kind in ("push", "pull"):
                        median, p95 = stats(timings[size][kind])
                        cells.append(f"{median * 1e3:>7.2f}/{p95 * 1e3:<7.2f}ms")
                        if size == "100B":
                            medians[f"{backend} {kind}"] = median
                first = timings["first"] * 1e3
                print(
                    f"{method:<11}{backend:<16}{first:>9.1f}ms" + "".join(f"{c:>16}" for c in cells)
                )
            for kind in ("push", "pull"):
                helper = medians.get(f"files {kind}")
                if helper is None:
                    continue
                over_db = (helper - medians.get(f"database {kind}", helper)) * 1e3
                over_local = (helper - medians.get(f"files-in-worker {kind}", helper)) * 1e3
                print(
                    f"  {method} 100 B {kind}: the helper path adds {over_db:+.2f} ms "
                    f"over database, {over_local:+.2f} ms over that backend in the worker"
                )
    finally:
        if server is not None:
            server.kill()
    print("cells: median/p95 per call; first call: the task's first push (helper start included)")


if __name__ == "__main__":
    main()
