"""Dag parsing throughput per start method, against importing the same files in one process.

Generates 300 Dag files of 10 tasks each, then for each start method runs one pass of
the Dag processor (``parsing_processes=2``, a fresh SQLite database) in a process of its
own, and prints files per second, the manager's peak RSS and the largest parser's peak
RSS. The lower bound imports every file in one process, without children or database.
Targets: forkserver within 2x of fork, spawn within 3x of fork, on throughput.

    python benchmarks/dag_parsing.py [--files 300] [--tasks 10] [--methods fork,spawn]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DAG_FILE = """
import datetime as dt
from spawnflow import Dag, task, CommandTask

with Dag("generated_{n}", schedule="@daily", start_date=dt.datetime(2026, 1, 1), tags=["bench"]):
    previous = None
    for i in range({tasks}):
        current = CommandTask(f"step_{{i}}", f"echo {{i}}")
        if previous is not None:
            previous >> current
        previous = current
"""


def generate(folder: Path, files: int, tasks: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(files):
        (folder / f"dag_{n:03}.py").write_text(DAG_FILE.format(n=n, tasks=tasks))


def run_processor(method: str, folder: Path, home: Path) -> dict:
    """In this process: one pass of the Dag processor over ``folder``."""
    from _setup import install_settings

    from spawnflow.bootstrap import platform
    from spawnflow.processors.dag_processor.manager import DagFileProcessorManager

    snapshot = install_settings(home, {
        "core.dags_folder": str(folder), "core.load_examples": "false",
        "dag_processor.parsing_processes": "2",
    })  # fmt: skip
    started = time.perf_counter()
    summary = DagFileProcessorManager(snapshot, method=method).run(once=True)[0]
    seconds = time.perf_counter() - started
    return {
        "files": summary.parsed, "dags": summary.dags, "errors": len(summary.errors),
        "seconds": seconds, "manager_rss": platform.peak_rss_bytes(),
        "parser_rss": summary.largest_parser_rss,
    }  # fmt: skip


def import_in_one_process(folder: Path) -> dict:
    """In this process: import every file, as the lower bound."""
    import importlib.util

    from spawnflow.bootstrap import platform
    from spawnflow.sdk import dags

    started = time.perf_counter()
    count = 0
    for n, path in enumerate(sorted(folder.glob("*.py"))):
        spec = importlib.util.spec_from_file_location(f"bench_dag_{n}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        count += 1
    return {
        "files": count, "dags": len(dags.built_dags()), "errors": 0,
        "seconds": time.perf_counter() - started, "manager_rss": platform.peak_rss_bytes(),
        "parser_rss": 0,
    }  # fmt: skip


def measure(kind: str, folder: Path) -> dict:
    """Run one measurement in a fresh interpreter, so that RSS figures are its own."""
    home = Path(tempfile.mkdtemp(prefix="spawnflow-bench-home-"))
    done = subprocess.run(
        [sys.executable, __file__, "--measure", kind, "--folder", str(folder), "--home", str(home)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--methods", default=None)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.measure:
        folder = Path(args.folder)
        if args.measure == "one-process":
            result = import_in_one_process(folder)
        else:
            result = run_processor(args.measure, folder, Path(args.home))
        print(json.dumps(result))
        return

    from spawnflow.bootstrap import startmethods

    folder = Path(tempfile.mkdtemp(prefix="spawnflow-bench-dags-"))
    generate(folder, args.files, args.tasks)
    methods = args.methods.split(",") if args.methods else list(startmethods.available())
    print(f"{args.files} Dag files x {args.tasks} tasks, parsing_processes=2, one pass each")
    print(f"{'run':<12}{'files/s':>9}{'seconds':>9}{'dags':>6}{'errors':>8}"
          f"{'manager RSS':>13}{'largest parser RSS':>20}{'vs fork':>9}")  # fmt: skip
    results = {kind: measure(kind, folder) for kind in [*methods, "one-process"]}
    fork_rate = None
    if "fork" in results:
        fork_rate = results["fork"]["files"] / results["fork"]["seconds"]
    for kind, r in results.items():
        rate = r["files"] / r["seconds"]
        ratio = f"{fork_rate / rate:.2f}x" if fork_rate and kind != "one-process" else "-"
        parser_rss = f"{r['parser_rss'] / 2**20:.1f} MiB" if r["parser_rss"] else "-"
        print(
            f"{kind:<12}{rate:>9.1f}{r['seconds']:>9.2f}{r['dags']:>6}{r['errors']:>8}"
            f"{r['manager_rss'] / 2**20:>9.1f} MiB{parser_rss:>20}{ratio:>9}"
        )
    print("vs fork: how many times longer than fork the pass took (fork/method throughput)")


if __name__ == "__main__":
    main()
