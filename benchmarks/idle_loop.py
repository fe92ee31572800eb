"""An idle scheduler turn against the history in its database.

One manual Dag of five tasks is parsed; its database then holds N finished runs (every
task instance succeeded) and nothing active, N in 0, 2,000 and 20,000 by default. For
each N (a server's planner statistics refreshed, as its own upkeep does) a scheduler
with an executor that runs nothing (an in-process stand-in) times
whole turns of its loop (``Scheduler.loop_once``: heartbeat, due runs, queued runs,
waiting tasks, stale tasks and deferrals, queueing, the summary) with nothing to do.
Printed per N: the median and p95 of a turn in ms, and the median's ratio against the
empty database's in the same process (flat is 1.0: an idle loop must not read history).

    python benchmarks/idle_loop.py [--turns 200] [--history 0,2000,20000]
        [--database-url postgresql://postgres@127.0.0.1:5432/bench]
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

from _setup import install_settings, summary

from spawnflow.executors import BaseExecutor

DAG = """
from spawnflow import Dag, task


@task
def noop():
    pass


with Dag("history"):
    for _ in range(5):
        noop()
"""
#: Rows per INSERT statement while the history is written.
CHUNK = 2000


class Idle(BaseExecutor):
    """The executor stand-in: takes nothing, runs nothing, reports nothing."""

    def start(self) -> None:
        pass

    def free_slots(self) -> int:
        return 4

    def queue(self, workload) -> None:
        raise AssertionError("an idle scheduler queued a task")

    def running(self) -> int:
        return 0

    def holds(self) -> set[int]:
        return set()

    def events(self) -> list:
        return []

    def wait(self, timeout: float) -> None:
        pass

    def end(self, grace=None) -> list:
        return []


def add_history(first: int, count: int, task_ids: list[str]) -> None:
    """Finished runs ``first`` .. ``first + count - 1`` of the Dag, with their tasks."""
    from sqlalchemy import func, insert, select

    from spawnflow.bootstrap import orm
    from spawnflow.models.run import DagRun, TaskInstance

    start = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    for offset in range(first, first + count, CHUNK):
        numbers = range(offset, min(first + count, offset + CHUNK))
        with orm.session_scope() as session:
            session.execute(insert(DagRun), [{
                "dag_id": "history", "run_id": f"scheduled__{n}", "run_type": "scheduled",
                "state": "success", "logical_date": start + dt.timedelta(hours=n),
                "conf": "{}", "start_date": start, "end_date": start,
            } for n in numbers])  # fmt: skip
            low = session.scalar(select(func.min(DagRun.id)).where(
                DagRun.run_id == f"scheduled__{numbers[0]}"))  # fmt: skip
            session.execute(insert(TaskInstance), [{
                "dag_run_id": low + i, "dag_id": "history", "task_id": task_id,
                "state": "success", "try_number": 1, "start_date": start, "end_date": start,
            } for i in range(len(numbers)) for task_id in task_ids])  # fmt: skip
    analyze()


def analyze() -> None:
    """Fresh planner statistics on a server, as its own upkeep keeps them (autovacuum on
    PostgreSQL, InnoDB's persistent statistics): rows written in one burst would
    otherwise meet plans made for the empty tables (psycopg prepares a statement run
    five times, with a generic plan). SQLite keeps none unless asked, and spawnflow
    does not ask."""
    from sqlalchemy import text

    from spawnflow.bootstrap import orm

    engine = orm.engine()
    if engine.dialect.name == "sqlite":
        return
    with engine.begin() as connection:
        if engine.dialect.name == "mysql":
            connection.execute(text("ANALYZE TABLE dag_run, task_instance"))
        else:
            connection.execute(text("ANALYZE"))


def time_turns(scheduler, turns: int) -> list[float]:
    times = []
    for _ in range(turns):
        started = time.perf_counter()
        summary_ = scheduler.loop_once()
        times.append(time.perf_counter() - started)
        assert summary_.idle, summary_
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--history", default="0,2000,20000", help="finished runs, ascending")
    parser.add_argument("--database-url", default=None, help="default: a SQLite file")
    args = parser.parse_args()
    sizes = [int(n) for n in args.history.split(",")]

    home = Path(tempfile.mkdtemp(prefix="spawnflow-bench-"))
    (home / "dags").mkdir()
    (home / "dags" / "history.py").write_text(DAG)
    url = args.database_url or f"sqlite:///{home.as_posix()}/bench.db"
    snapshot = install_settings(home, {"database.url": url, "core.load_examples": "false",
                                       "core.dags_folder": str(home / "dags")})  # fmt: skip

    from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
    from spawnflow.processors.scheduler.job import Scheduler

    DagFileProcessorManager(snapshot).run(once=True)
    task_ids = ["noop"] + [f"noop__{n}" for n in range(1, 5)]
    scheduler = Scheduler(snapshot, executor=Idle(snapshot))
    scheduler._register()  # as run() does first
    figures: dict[int, tuple[float, float]] = {}
    written = 0
    for n in sizes:
        add_history(written, n - written, task_ids)
        written = n
        time_turns(scheduler, 5)  # the Dag bag and the statement caches, warm
        figures[n] = summary(time_turns(scheduler, args.turns))

    print(f"idle scheduler turn, ms (median / p95 of {args.turns}); database {url.split(':')[0]}")
    base = figures[sizes[0]][0]
    for n, (median, p95) in figures.items():
        print(f"{n:>7} finished runs  {median * 1000:7.2f} / {p95 * 1000:7.2f}"
              f"   {median / base:5.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
