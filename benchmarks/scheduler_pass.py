"""The scheduler's cost per loop against the size of a run: one ``schedule_tasks`` pass.

A fan-out Dag (one root, N leaves) has one running run; the pass is timed in three
states of it, N in 50, 200 and 800:

- ``waiting``: the root runs, every leaf waits for it (nothing to decide: the steady
  state of a fan-out while its root runs);
- ``mid-flight``: the root succeeded, half the leaves too, a quarter run and a quarter
  are queued (nothing to decide either), and nothing changes between passes;
- ``mid-flight, one change``: the same, but one leaf changes state between passes (what
  most loops of a busy run see: some task finished since the last one);
- ``release``: the root just succeeded and every leaf is scheduled in this pass (the
  leaves are set back to waiting between passes, outside the timing).

The passes share one ``RunsSeen``, as a scheduler's loops do.

Printed per state and size: the median and p95 of a pass in ms, and the ratio of the
median against the 50-task run's in the same process (flat is 1.0 for the states with
nothing to decide). The database is a fresh SQLite file unless ``--database-url``
names a server (PostgreSQL or MySQL/MariaDB; its tables are reset).

    python benchmarks/scheduler_pass.py [--passes 50] [--sizes 50,200,800]
        [--database-url postgresql://postgres@127.0.0.1:5432/bench]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _setup import install_settings, summary

DAG = """
from spawnflow import Dag, task


@task
def noop():
    pass


with Dag("fanout_{n}", max_active_tasks=1000):
    root = noop()
    for n in range({n}):
        root >> noop()
"""


def set_states(run_id: int, root: str, leaves: dict[str, list[str]]) -> None:
    """The root's state, then each leaf state for the task ids listed under it."""
    from sqlalchemy import update

    from spawnflow.bootstrap import orm
    from spawnflow.models.run import TaskInstance

    with orm.session_scope() as session:
        where = TaskInstance.dag_run_id == run_id
        session.execute(update(TaskInstance).where(where, TaskInstance.task_id == "noop")
                        .values(state=root))  # fmt: skip
        for state, task_ids in leaves.items():
            if task_ids:
                session.execute(update(TaskInstance)
                                .where(where, TaskInstance.task_id.in_(task_ids))
                                .values(state=state, start_date=None, end_date=None,
                                        reason=None))  # fmt: skip


def time_passes(bag, seen, run_id: int, passes: int, before=None) -> list[float]:
    from spawnflow.bootstrap import orm
    from spawnflow.processors.scheduler import runs, waiting

    times = []
    for n in range(passes):
        if before is not None:
            before(n)
        started = time.perf_counter()
        with orm.session_scope() as session:
            waiting.schedule_tasks(session, bag, runs.utcnow(), {run_id}, seen)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--sizes", default="50,200,800")
    parser.add_argument("--database-url", default=None, help="default: a SQLite file")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]

    home = Path(tempfile.mkdtemp(prefix="spawnflow-bench-"))
    (home / "dags").mkdir()
    for n in sizes:
        (home / "dags" / f"fanout_{n}.py").write_text(DAG.format(n=n))
    url = args.database_url or f"sqlite:///{home.as_posix()}/bench.db"
    snapshot = install_settings(home, {"database.url": url, "core.load_examples": "false",
                                       "core.dags_folder": str(home / "dags")})  # fmt: skip

    from spawnflow.bootstrap import orm
    from spawnflow.comms.states import TaskState
    from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
    from spawnflow.processors.scheduler import runs, waiting

    DagFileProcessorManager(snapshot).run(once=True)
    bag, seen = runs.DagBag(), waiting.RunsSeen()
    figures: dict[str, dict[int, tuple[float, float]]] = {}
    for n in sizes:
        with orm.session_scope() as session:
            run_id = runs.trigger_run(session, f"fanout_{n}").id
        with orm.session_scope() as session:
            runs.start_queued_runs(session, bag, runs.utcnow(), {run_id})
        leaves = [f"noop__{i}" for i in range(1, n + 1)]
        quarter = n // 4
        states = {
            "waiting": (TaskState.RUNNING, {TaskState.NONE: leaves}),
            "mid-flight": (TaskState.SUCCESS, {
                TaskState.SUCCESS: leaves[: 2 * quarter],
                TaskState.RUNNING: leaves[2 * quarter : 3 * quarter],
                TaskState.QUEUED: leaves[3 * quarter :],
            }),
        }  # fmt: skip
        for name, (root, leaf_states) in states.items():
            set_states(run_id, root, leaf_states)
            time_passes(bag, seen, run_id, 3)  # warm the Dag bag and the statement caches
            figures.setdefault(name, {})[n] = summary(time_passes(bag, seen, run_id, args.passes))

        def one_change(count: int, run_id=run_id, leaf=leaves[2 * quarter]) -> None:
            state = TaskState.SUCCESS if count % 2 == 0 else TaskState.RUNNING
            set_states(run_id, TaskState.SUCCESS, {state: [leaf]})

        time_passes(bag, seen, run_id, 3, one_change)
        figures.setdefault("mid-flight, one change", {})[n] = summary(
            time_passes(bag, seen, run_id, args.passes, one_change)
        )

        def release(_count: int, run_id=run_id, leaves=leaves) -> None:
            set_states(run_id, TaskState.SUCCESS, {TaskState.NONE: leaves})

        time_passes(bag, seen, run_id, 3, release)
        figures.setdefault("release", {})[n] = summary(
            time_passes(bag, seen, run_id, args.passes, release)
        )

    print(f"one schedule_tasks pass on {url.split(':')[0]}, {args.passes} passes each")
    print(f"{'state':<24}{'tasks':>7}{'median ms':>12}{'p95 ms':>10}"
          f"{'per task us':>13}{f'vs {sizes[0]}':>9}")  # fmt: skip
    for name, by_size in figures.items():
        base = by_size[sizes[0]][0]
        for n, (median, p95) in by_size.items():
            print(f"{name:<24}{n + 1:>7}{median * 1e3:>12.2f}{p95 * 1e3:>10.2f}"
                  f"{median * 1e6 / (n + 1):>13.1f}{median / base:>8.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
