"""SQLite held by another process past the busy timeout: waited out, nothing lost.

Another program (a backup, a ``sqlite3`` shell someone left in a transaction) holds
the write lock for longer than ``[database] sqlite_busy_timeout``: every writer gets
"database is locked". spawnflow rides it out as it does a server that is away.
"""

from __future__ import annotations

import sqlite3
import time

import pytest

from tests.faults.test_database_outage import DAGS, each_task_ran_once, scheduler_until_idle
from tests.scheduler.test_e2e import environment, spawnflow, wait_for

pytestmark = pytest.mark.process


def test_a_write_lock_held_past_the_busy_timeout_loses_nothing(home, tmp_path, start_method):
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    marks.mkdir()
    dags.mkdir()
    (dags / "outage.py").write_text(DAGS.format(marks=str(marks)))
    database = tmp_path / "locked.db"
    url = f"sqlite:///{database.as_posix()}"
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                      SPAWNFLOW__EXECUTOR__PARALLELISM="4",
                      SPAWNFLOW__DATABASE__SQLITE_BUSY_TIMEOUT="0.5")  # fmt: skip
    assert spawnflow("db", "migrate", env=env).returncode == 0
    assert spawnflow("dag-processor", "--once", env=env).returncode == 0
    assert spawnflow("dags", "trigger", "outage", env=env).returncode == 0
    with scheduler_until_idle(env) as run:
        wait_for(lambda: len(list(marks.iterdir())) >= 2, what="the first tasks to finish")
        holder = sqlite3.connect(database, timeout=60, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # the write lock, as another program takes it
        time.sleep(4)  # eight busy timeouts: the fault this test injects
        holder.execute("COMMIT")
        holder.close()
    assert "database out of reach" in run.err
    assert "database is locked" in run.err
    assert "database reachable again" in run.err
    each_task_ran_once(url, marks)
