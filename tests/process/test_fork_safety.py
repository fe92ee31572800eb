"""Law 3 under each start method, on SQLite, PostgreSQL and MariaDB.

The spawn-mode corruption Airflow hit: its Dag processor, started with spawn,
reloaded settings and the ORM in the child, which disposed of pools the parent
was still using. Here the parent keeps a session and its pool busy across a
child's whole life and checks that nothing it holds was touched.
"""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import func, select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.launcher import ChildSpec, launch
from spawnflow.models import Job
from tests.fixtures import targets
from tests.fixtures.messages import Finished, Go

pytestmark = pytest.mark.process


def add_jobs(session, job_type: str, count: int = 3) -> None:
    session.add_all(Job(job_type=job_type, pid=0) for _ in range(count))
    session.commit()


def test_parent_session_sees_every_row_and_keeps_its_server_connections(
    start_method, migrated_database, database_url
):
    bound = orm.engine(database_url)
    with orm.sessionmaker_for(database_url)() as session:
        check_parent_keeps_its_connections(start_method, bound, session, database_url)


def check_parent_keeps_its_connections(start_method, bound, session, database_url):
    add_jobs(session, "parent-before")
    held = session.connection()  # checked out for the child's whole life
    held_id = orm.server_connection_id(held)
    with bound.connect() as idle:  # returned to the pool, idle while the child runs
        idle_id = orm.server_connection_id(idle)
    assert idle_id != held_id

    spec = ChildSpec(
        "test-db-writer",
        "tests.fixtures.targets:write_jobs",
        {"url": database_url, "marker": "child", "count": 4},
    )
    with launch(spec, method=start_method) as child:
        child.wait_ready()
        first = child.channel.recv(timeout=120).values
        add_jobs(session, "parent-during")  # while the child is running
        request_id = child.channel.next_id()
        child.channel.send(Go(id=request_id))
        done = child.channel.recv(timeout=120)
        assert isinstance(done, Finished)
        assert done.id == request_id
        assert child.join(timeout=120).exitcode == 0
    add_jobs(session, "parent-after")

    counts = Counter(
        dict(session.execute(select(Job.job_type, func.count()).group_by(Job.job_type)).all())
    )
    assert counts == {
        "parent-before": 3,
        "child-first": 4,
        "parent-during": 3,
        "child-second": 4,
        "parent-after": 3,
    }
    # The child never held an engine of ours and never talked over our connections.
    assert first["engines_of_others"] == 0
    assert {first["connection"], done.values["connection"]}.isdisjoint({held_id, idle_id})
    # Same server-side connections as before, and they still work.
    assert orm.server_connection_id(session.connection()) == held_id
    with bound.connect() as again:
        assert orm.server_connection_id(again) == idle_id


def test_only_a_fork_child_inherits_the_parents_session(
    start_method, migrated_database, database_url, monkeypatch
):
    with orm.sessionmaker_for(database_url)() as session:
        session.execute(select(func.count()).select_from(Job))
        monkeypatch.setattr(targets, "PARENT_SESSION", session)
        report = run_inheritor(start_method, "execute")
    if start_method == "fork":
        assert report["outcome"].startswith("refused: process ")
    else:
        assert report == {"outcome": "nothing inherited"}


ATTEMPTS = ["execute", "driver sql", "commit", "rollback", "invalidate", "detach", "close"]


@pytest.mark.skipif("fork" not in platforms.current().start_methods, reason="no fork here")
@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_every_use_of_a_connection_inherited_through_fork_is_refused(
    attempt, migrated_database, database_url, monkeypatch
):
    with orm.sessionmaker_for(database_url)() as session:
        add_jobs(session, "parent")
        session.execute(
            select(func.count()).select_from(Job)
        )  # holds a connection, in a transaction
        held_id = orm.server_connection_id(session.connection())
        monkeypatch.setattr(targets, "PARENT_SESSION", session)

        outcome = run_inheritor("fork", attempt)["outcome"]

        assert outcome.startswith("refused"), outcome
        # Nothing reached the server: the parent's connection and transaction are intact.
        assert orm.server_connection_id(session.connection()) == held_id
        add_jobs(session, "parent-again")
        assert session.scalar(select(func.count()).select_from(Job)) == 6


def run_inheritor(method: str, attempt: str) -> dict:
    spec = ChildSpec(
        "test-inheritor", "tests.fixtures.targets:use_inherited_session", {"attempt": attempt}
    )
    with launch(spec, method=method) as child:
        child.wait_ready()
        report = child.channel.recv(timeout=120).values
        assert child.join(timeout=120).exitcode == 0
    return report
