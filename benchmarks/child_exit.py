"""The CPU a spawned child spends on its way out: os._exit against the interpreter's teardown.

A spawned launcher child ends as multiprocessing ends a forked one: its atexit hooks,
then ``os._exit`` (``startmethods.SpawnedChild``). The baseline is the standard
library's own spawned Process, which returns to the interpreter and tears every module
down. For each role, launches alternate between the two in this one process (the
parent picks the class per launch), each child importing its role's target module as
the bootstrap does and leaving at once. The CPU of each is its whole life's user and
system time, read from this process's reaped-children usage around its launch. Prints
the median and p95 per kind and the ratio of medians.

    python benchmarks/child_exit.py [--launches 20] [--roles task,executor-worker]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
from pathlib import Path

from _setup import as_installed, summary

ROLES = {
    "task": "spawnflow.processors.task_runner:run_task",
    "executor-worker": "spawnflow.processors.worker.worker:run",
    "scheduler": "spawnflow.processors.scheduler.job:run",
}


def children_cpu_ms() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (used.ru_utime + used.ru_stime) * 1000


def one_launch(role: str, quick_exit: bool, log_file: Path) -> float:
    from spawnflow.bootstrap import startmethods
    from spawnflow.bootstrap.launcher import ChildSpec, launch

    original = startmethods.process_class
    if not quick_exit:
        startmethods.process_class = lambda method, ctx: ctx.Process
    try:
        before = children_cpu_ms()
        spec = ChildSpec(f"bench-{role}", "_targets:launcher_role", {"target": ROLES[role]},
                         log_file=log_file)  # fmt: skip
        with launch(spec, method="spawn") as child:
            child.wait_ready(timeout=120)
            child.channel.recv(timeout=120)
            child.join(timeout=120)
        return children_cpu_ms() - before
    finally:
        startmethods.process_class = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=20, help="per role and kind")
    parser.add_argument("--roles", default="task,executor-worker")
    options = parser.parse_args()
    as_installed()
    import spawnflow.comms  # noqa: F401 - the message types the children send
    from spawnflow.bootstrap import settings

    with tempfile.TemporaryDirectory() as folder:
        settings.install(settings.resolve(environ={"SPAWNFLOW_HOME": folder}))
        for role in options.roles.split(","):
            measured: dict[str, list[float]] = {"os._exit": [], "teardown": []}
            for n in range(options.launches):
                for quick in (True, False) if n % 2 else (False, True):
                    kind = "os._exit" if quick else "teardown"
                    measured[kind].append(one_launch(role, quick, Path(folder) / "child.log"))
            medians = {}
            for kind, values in measured.items():
                medians[kind], p95 = summary(values)
                print(f"{role:16s} {kind:9s} CPU per child: median {medians[kind]:6.0f} ms, "
                      f"p95 {p95:6.0f} ms (n={len(values)})")  # fmt: skip
            print(f"{role:16s} ratio os._exit / teardown: "
                  f"{medians['os._exit'] / medians['teardown']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
