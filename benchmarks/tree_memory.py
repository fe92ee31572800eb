"""Memory of the ``spawnflow standalone`` process tree per start method, per role.

For each start method, ``spawnflow standalone`` runs in a home of its own (SQLite, no
example Dags, ``[executor] parallelism`` 4, ``[executor] worker_idle_timeout`` 5 s) with
one Dag of eight tasks that wait for a gate file. The tree is measured twice: idle (the
Dag parsed, nothing running, and the worker the executor starts with gone after its idle
timeout) and busy (four tasks running on four workers, waiting at the gate).
Each process is named after its role on Linux (``/proc/<pid>/comm``); the benchmark
sums PSS (each shared page split between the processes that share it) and RSS per
role, and prints the tree's total, the median of three samples a second apart.

    python benchmarks/tree_memory.py [--methods fork,forkserver,spawn] [--floor]

``--floor`` prints, first, what one fresh interpreter costs with what each role
imports (nothing; the launcher; SQLAlchemy's ORM and spawnflow's models; the
scheduler's modules): a process that exec'd its own interpreter (spawn, and each
forkserver with the processes it forks first) cannot be smaller than its row.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _setup import as_installed

DAG = """
import time
from pathlib import Path

from spawnflow import Dag, task


@task
def hold(gate):
    while not Path(gate).exists():
        time.sleep(0.05)


with Dag("held", max_active_tasks=8):
    for n in range(8):
        hold({gate!r})
"""


def tree(top: psutil.Process) -> list[psutil.Process]:
    try:
        return [top, *top.children(recursive=True)]
    except psutil.Error:
        return [top]


def role_of(process: psutil.Process, top: psutil.Process) -> str:
    if process.pid == top.pid:
        return "standalone"
    try:
        # Not psutil's name(): for a name of 15 bytes (the kernel's limit) it guesses
        # that it was cut short and answers with the command line's program instead.
        name = Path(f"/proc/{process.pid}/comm").read_text().strip()
        cmdline = " ".join(process.cmdline())
    except (OSError, psutil.Error):
        return "gone"
    if name.startswith("fs-"):
        return "forkserver, own"  # a launcher's own server, forked from a shared one
    if not name.startswith("python"):
        return name  # a role (a forkserver's children inherit its command line too)
    if "multiprocessing.forkserver" in cmdline:
        return "forkserver, shared"
    if "resource_tracker" in cmdline:
        return "resource tracker"
    return f"other ({name})"


def sample(top: psutil.Process) -> dict[str, tuple[int, float, float]]:
    """Per role: how many processes, PSS and RSS in MiB."""
    found: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for process in tree(top):
        try:
            memory = process.memory_full_info()
        except psutil.Error:
            continue
        entry = found[role_of(process, top)]
        entry[0] += 1
        entry[1] += memory.pss / 2**20
        entry[2] += memory.rss / 2**20
    return {role: (int(n), pss, rss) for role, (n, pss, rss) in found.items()}


def median_sample(top: psutil.Process, samples: int = 3) -> dict[str, tuple[int, float, float]]:
    """The sample whose total PSS is the median of ``samples`` taken a second apart."""
    taken = []
    for n in range(samples):
        if n:
            time.sleep(1.0)
        taken.append(sample(top))
    totals = [sum(pss for _, pss, _ in s.values()) for s in taken]
    return taken[totals.index(statistics.median_low(totals))]


def wait_for(what: str, check, top: psutil.Process, timeout: float = 300.0) -> None:
    ends = time.monotonic() + timeout
    while not check():
        if time.monotonic() > ends:
            roles = sorted(role_of(p, top) for p in tree(top))
            raise SystemExit(f"tree_memory: gave up waiting for {what}; the tree: {roles}")
        time.sleep(0.2)


def count(top: psutil.Process, role: str) -> int:
    return sum(1 for p in tree(top) if role_of(p, top) == role)


def measure(method: str) -> dict[str, dict[str, tuple[int, float, float]]]:
    home = Path(tempfile.mkdtemp(prefix="spawnflow-bench-memory-"))
    gate = home / "gate"
    (home / "dags").mkdir()
    (home / "dags" / "held.py").write_text(DAG.format(gate=str(gate)))
    env = {
        **os.environ, "SPAWNFLOW_HOME": str(home),
        "SPAWNFLOW__CORE__MP_START_METHOD": method, "SPAWNFLOW__CORE__LOAD_EXAMPLES": "false",
        "SPAWNFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "SPAWNFLOW__EXECUTOR__PARALLELISM": "4", "SPAWNFLOW__EXECUTOR__WORKER_IDLE_TIMEOUT": "5",
    }  # fmt: skip
    cli = [sys.executable, "-m", "spawnflow"]
    standalone = subprocess.Popen([*cli, "standalone"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)  # fmt: skip
    top = psutil.Process(standalone.pid)
    try:
        wait_for("the scheduler", lambda: count(top, "scheduler") == 1, top)

        def listed() -> bool:
            done = subprocess.run([*cli, "dags", "list"], env=env, capture_output=True, text=True)
            return "held" in done.stdout

        wait_for("the Dag to be parsed", listed, top)
        wait_for("idle workers to leave", lambda: count(top, "executor-worker") == 0, top)
        idle = median_sample(top)
        subprocess.run([*cli, "dags", "trigger", "held"], env=env, check=True,
                       capture_output=True)  # fmt: skip
        wait_for("four running tasks", lambda: count(top, "task") == 4, top)
        assert count(top, "executor-worker") == 4
        time.sleep(1.0)  # the tasks' imports settle (measured, not a condition)
        busy = median_sample(top)
    finally:
        gate.touch()
        standalone.send_signal(signal.SIGTERM)
        try:
            standalone.wait(timeout=120)
        except subprocess.TimeoutExpired:
            standalone.kill()
    return {"idle": idle, "busy": busy}


#: What a fresh interpreter imports for each row of ``--floor``.
FLOOR_IMPORTS = {
    "bare interpreter": "",
    "launcher (a child's boot)": "import spawnflow.bootstrap.launcher",
    "+ SQLAlchemy ORM, models": (
        "import spawnflow.bootstrap.launcher, sqlalchemy.orm, spawnflow.models;"
        "spawnflow.models.Base"
    ),
    "+ scheduler modules": (
        "import spawnflow.bootstrap.launcher, spawnflow.models;spawnflow.models.Base;"
        "import spawnflow.processors.scheduler.job"
    ),
}


def floor() -> None:
    """PSS and RSS of one interpreter per row of FLOOR_IMPORTS, alone (median of 3)."""
    print("one fresh interpreter; PSS / RSS in MiB (median of 3)")
    for label, imports in FLOOR_IMPORTS.items():
        taken = []
        for _ in range(3):
            code = f"{imports}\nimport sys\nprint('ready', flush=True)\nsys.stdin.read()"
            child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip
            try:
                said = child.stdout.readline() if child.stdout is not None else ""
                if said.strip() != "ready":
                    raise SystemExit(f"tree_memory: the {label!r} interpreter did not start")
                memory = psutil.Process(child.pid).memory_full_info()
                taken.append((memory.pss / 2**20, memory.rss / 2**20))
            finally:
                child.communicate("")
        pss, rss = statistics.median(p for p, _ in taken), statistics.median(r for _, r in taken)
        print(f"{label:<28}{pss:7.1f} / {rss:6.1f}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=None)
    parser.add_argument("--floor", action="store_true", help="first, one interpreter per role")
    args = parser.parse_args()
    as_installed()
    if args.floor:
        floor()
    from spawnflow.bootstrap import startmethods

    methods = args.methods.split(",") if args.methods else list(startmethods.available())
    results = {method: measure(method) for method in methods}
    print("spawnflow standalone, 4 workers, SQLite; PSS / RSS in MiB (processes)")
    for state in ("idle", "busy"):
        roles = sorted({role for r in results.values() for role in r[state]})
        print(f"\n{state:<18}" + "".join(f"{m:>24}" for m in methods))
        for role in roles:
            cells = []
            for method in methods:
                n, pss, rss = results[method][state].get(role, (0, 0.0, 0.0))
                cells.append(f"{pss:7.1f} / {rss:6.1f} ({n:>2})" if n else "-")
            print(f"{role:<18}" + "".join(f"{c:>24}" for c in cells))
        totals = [sum(v[1] for v in results[m][state].values()) for m in methods]
        print(f"{'tree PSS':<18}" + "".join(f"{t:>24.1f}" for t in totals))
        if "fork" in methods:
            base = totals[methods.index("fork")]
            print(f"{'vs fork':<18}" + "".join(f"{t / base:>23.2f}x" for t in totals))


if __name__ == "__main__":
    main()
