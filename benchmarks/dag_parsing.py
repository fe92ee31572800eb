"""Dag parsing throughput per start method, one fresh process per file against batches.

Generates 300 Dag files of 10 tasks each, then for each start method and each
``[dag_processor] parser_max_files`` runs one pass of the Dag processor
(``parsing_processes=2``, a fresh SQLite database) in a process of its own, ``--repeat``
times, interleaved, and prints files per second (median and p95 of the repeats), the
parser processes the pass started, the manager's and the largest parser's peak RSS,
and the ratio to fork with the same ``parser_max_files``. ``parser_max_files=1`` is a
fresh parser per file (as before batching); the lower bound imports every file in one
process, without children or database.

    python benchmarks/dag_parsing.py [--files 300] [--tasks 10] [--methods fork,spawn]
                                     [--max-files 1,50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _setup import as_installed, summary

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


def run_processor(method: str, max_files: int, folder: Path, home: Path) -> dict:
    """In this process: one pass of the Dag processor over ``folder``."""
    from _setup import install_settings

    from spawnflow.bootstrap import platform
    from spawnflow.processors.dag_processor.manager import DagFileProcessorManager

    snapshot = install_settings(home, {
        "core.dags_folder": str(folder), "core.load_examples": "false",
        "core.mp_start_method": method,
        "dag_processor.parsing_processes": "2",
        "dag_processor.parser_max_files": str(max_files),
    })  # fmt: skip
    started = time.perf_counter()
    result = DagFileProcessorManager(snapshot).run(once=True)[0]
    seconds = time.perf_counter() - started
    return {
        "files": result.parsed, "dags": result.dags, "errors": len(result.errors),
        "seconds": seconds, "manager_rss": platform.peak_rss_bytes(),
        "parser_rss": result.largest_parser_rss, "parsers": result.parsers,
        "recycled": result.recycled[:3],
    }  # fmt: skip


def import_in_one_process(folder: Path) -> dict:
    """In this process: import every file, as the lower bound."""
    import importlib.util

    from spawnflow.bootstrap import platform
    from spawnflow.sdk import building

    started = time.perf_counter()
    count = 0
    for n, path in enumerate(sorted(folder.glob("*.py"))):
        spec = importlib.util.spec_from_file_location(f"bench_dag_{n}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        count += 1
    return {
        "files": count, "dags": len(building.built_dags()), "errors": 0,
        "seconds": time.perf_counter() - started, "manager_rss": platform.peak_rss_bytes(),
        "parser_rss": 0, "parsers": 0, "recycled": [],
    }  # fmt: skip


def measure(kind: str, max_files: int, folder: Path) -> dict:
    """Run one measurement in a fresh interpreter, so that RSS figures are its own."""
    home = Path(tempfile.mkdtemp(prefix="spawnflow-bench-home-"))
    done = subprocess.run(
        [sys.executable, __file__, "--measure", kind, "--max-files", str(max_files),
         "--folder", str(folder), "--home", str(home)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--methods", default=None)
    parser.add_argument("--max-files", default="1,50")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    args = parser.parse_args()
    as_installed()

    if args.measure:
        folder = Path(args.folder)
        if args.measure == "one-process":
            result = import_in_one_process(folder)
        else:
            result = run_processor(args.measure, int(args.max_files), folder, Path(args.home))
        print(json.dumps(result))
        return

    from spawnflow.bootstrap import startmethods

    folder = Path(tempfile.mkdtemp(prefix="spawnflow-bench-dags-"))
    generate(folder, args.files, args.tasks)
    methods = args.methods.split(",") if args.methods else list(startmethods.available())
    runs = [(m, int(n)) for n in args.max_files.split(",") for m in methods]
    runs.append(("one-process", 0))
    print(f"{args.files} Dag files x {args.tasks} tasks, parsing_processes=2, one pass each, "
          f"{args.repeat} repeats interleaved")  # fmt: skip
    results: dict[tuple[str, int], list[dict]] = {run: [] for run in runs}
    for _ in range(args.repeat):
        for method, max_files in runs:
            results[(method, max_files)].append(measure(method, max_files, folder))
    print(f"{'run':<12}{'max_files':>10}{'files/s':>9}{'p95':>7}{'parsers':>9}{'errors':>8}"
          f"{'manager RSS':>13}{'parser RSS':>12}{'vs fork':>9}")  # fmt: skip
    rates = {run: [r["files"] / r["seconds"] for r in rs] for run, rs in results.items()}
    for (method, max_files), rs in results.items():
        median, _ = summary(rates[(method, max_files)])
        # The p95 of throughput is the slow end: the 95th percentile of the pass's time.
        slow = args.files / summary([r["seconds"] for r in rs])[1]
        fork = rates.get(("fork", max_files))
        ratio = f"{summary(fork)[0] / median:.2f}x" if fork and method != "one-process" else "-"
        last = rs[-1]
        parser_rss = f"{last['parser_rss'] / 2**20:.1f} MiB" if last["parser_rss"] else "-"
        print(
            f"{method:<12}{max_files or '-':>10}{median:>9.1f}{slow:>7.1f}{last['parsers']:>9}"
            f"{last['errors']:>8}{last['manager_rss'] / 2**20:>9.1f} MiB{parser_rss:>12}{ratio:>9}"
        )
        for why in last["recycled"]:
            print(f"    a parser left early: {why}")
    print("vs fork: how many times longer than fork (same parser_max_files) the pass took;")
    print("p95: files/s of the slowest pass of the repeats")


if __name__ == "__main__":
    main()
