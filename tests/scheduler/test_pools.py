"""Pools and priority without a process: effective weights, what a Dag stores, and
the scheduler's pool accounting on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from sqlalchemy import select, text

from spawnflow import CommandTask, Dag, DagDefinitionError
from spawnflow.bootstrap import orm
from spawnflow.comms.states import TaskState
from spawnflow.models.dag import DagModel, SerializedDagModel
from spawnflow.models.pool import Pool
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.processors.scheduler import runs
from spawnflow.processors.scheduler.queueing import missing_pool_reason, queue_tasks
from spawnflow.sdk import serialize

NOW = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def chain(rule: str, weights=(1, 2, 4), **dag_args) -> serialize.SerializedDag:
    """a >> b >> c, with ``weights`` and ``rule``."""
    with Dag("chain", **dag_args) as dag:
        a, b, c = (CommandTask(name, "true", priority_weight=weight, weight_rule=rule)
                   for name, weight in zip("abc", weights, strict=True))  # fmt: skip
        a >> b >> c
    return serialize.serialize(dag)


# -- weights (no database) ---------------------------------------------------------------


def test_downstream_weight_adds_every_downstream_task_s_weight():
    assert chain("downstream").priority_weights == {"a": 7, "b": 6, "c": 4}


def test_upstream_weight_adds_every_upstream_task_s_weight():
    assert chain("upstream").priority_weights == {"a": 1, "b": 3, "c": 7}


def test_absolute_weight_is_the_task_s_own():
    assert chain("absolute").priority_weights == {"a": 1, "b": 2, "c": 4}


def test_a_task_downstream_by_two_paths_counts_once():
    with Dag("diamond") as dag:
        top, left, right, bottom = (CommandTask(n, "true") for n in ("top", "l", "r", "bottom"))
        top >> [left, right] >> bottom
    assert serialize.serialize(dag).priority_weights["top"] == 4


def test_pool_settings_come_from_default_args_and_survive_the_stored_document():
    with Dag("pooled", default_args={"pool": "small", "pool_slots": 2, "priority_weight": 5,
                                     "weight_rule": "absolute"}) as dag:  # fmt: skip
        CommandTask("a", "true")
        CommandTask("b", "true", pool="big", pool_slots=1)
    document = serialize.DagDocument(serialize.VERSION, serialize.serialize(dag), "0" * 64)
    stored = serialize.decode(serialize.encode(document)).dag
    assert (stored.task("a").pool, stored.task("a").pool_slots) == ("small", 2)
    assert (stored.task("b").pool, stored.task("b").pool_slots) == ("big", 1)
    assert stored.priority_weights == {"a": 5, "b": 5}


def test_a_task_without_pool_settings_uses_default_pool_and_weight_one():
    with Dag("plain") as dag:
        CommandTask("a", "true")
    task = serialize.serialize(dag).task("a")
    assert (task.pool, task.pool_slots, task.priority_weight, task.weight_rule) == (
        "default_pool", 1, 1, "downstream")  # fmt: skip


@pytest.mark.parametrize(
    ("argument", "fragment"),
    [
        ({"pool_slots": 0}, "pool_slots 0 must be a whole number of at least 1"),
        ({"priority_weight": "high"}, "priority_weight 'high' must be a whole number"),
        ({"weight_rule": "sideways"}, "weight_rule 'sideways' must be one of downstream"),
        ({"pool": ""}, "pool must be a pool's name"),
    ],
)
def test_bad_pool_settings_are_a_definition_error_naming_the_setting(argument, fragment):
    with Dag("bad"), pytest.raises(DagDefinitionError, match=fragment):
        CommandTask("a", "true", **argument)


# -- pool accounting (every database) ------------------------------------------------------


def store(session, dag: Dag) -> serialize.SerializedDag:
    document = serialize.serialize(dag)
    session.add(DagModel(dag_id=dag.dag_id, fileloc=f"/dags/{dag.dag_id}.py", is_paused=False,
                         schedule=document.schedule.describe()))  # fmt: skip
    session.flush()
    data = serialize.encode(serialize.DagDocument(serialize.VERSION, document, "0" * 64))
    session.add(SerializedDagModel(dag_id=dag.dag_id, data=data.decode(),
                                   dag_hash=serialize.dag_hash(document)))  # fmt: skip
    return document


def scheduled(dag: Dag, day: int = 1) -> None:
    """Store ``dag`` (once) and a run of it on ``day`` whose task instances are all
    scheduled."""
    with orm.session_scope() as session:
        document = store(session, dag) if session.get(DagModel, dag.dag_id) is None else (
            serialize.serialize(dag))  # fmt: skip
        run = DagRun(dag_id=dag.dag_id, run_id=f"run{day}", run_type="manual", state="running",
                     logical_date=dt.datetime(2026, 1, day, tzinfo=dt.UTC))  # fmt: skip
        session.add(run)
        session.flush()
        for task in document.tasks:
            session.add(TaskInstance(
                dag_run_id=run.id, dag_id=dag.dag_id, task_id=task.task_id,
                state=TaskState.SCHEDULED, **runs.pool_columns(document, task),
            ))  # fmt: skip


def set_pool(name: str, slots: int, include_deferred: bool = False) -> None:
    with orm.session_scope() as session:
        pool = session.get(Pool, name) or Pool(pool=name)
        pool.slots, pool.include_deferred = slots, include_deferred
        session.add(pool)


def queue(settings, free_slots: int = 100) -> list[str]:
    """Task ids queued by one scheduler pass, in the order queued."""
    with orm.session_scope() as session:
        return [
            w.task_id for w in queue_tasks(session, runs.DagBag(), settings, free_slots, 1, NOW)
        ]


def states() -> dict[str, tuple[str, str | None]]:
    with orm.session_scope(write=False) as session:
        return {ti.task_id: (ti.state, ti.reason) for ti in session.scalars(select(TaskInstance))}


def wide(n: int, **task_args) -> Dag:
    with Dag("wide", max_active_tasks=100) as dag:
        for number in range(n):
            CommandTask(f"t{number}", "true", **task_args)
    return dag


def test_the_migration_creates_default_pool_with_128_slots(migrated_database):
    with orm.session_scope(write=False) as session:
        pool = session.get(Pool, "default_pool")
        assert (pool.slots, pool.include_deferred) == (128, False)


def test_a_pool_never_has_more_queued_and_running_than_its_slots(migrated_database):
    set_pool("two", 2)
    scheduled(wide(5, pool="two"))
    assert len(queue(migrated_database)) == 2
    assert queue(migrated_database) == []  # both still queued: no room
    with orm.session_scope() as session:
        ti = session.scalars(select(TaskInstance).where(TaskInstance.state == "queued")).first()
        ti.state = TaskState.RUNNING
    assert queue(migrated_database) == []  # running holds its slot too
    with orm.session_scope() as session:
        ti = session.scalars(select(TaskInstance).where(TaskInstance.state == "running")).one()
        ti.state = TaskState.SUCCESS
    assert len(queue(migrated_database)) == 1  # a finished one frees it


def test_pool_slots_count_what_each_task_takes(migrated_database):
    set_pool("three", 3)
    scheduled(wide(3, pool="three", pool_slots=2))
    assert len(queue(migrated_database)) == 1  # 2 of 3 slots; the next needs 2


def test_a_pool_of_zero_slots_is_paused(migrated_database):
    set_pool("paused", 0)
    scheduled(wide(2, pool="paused"))
    assert queue(migrated_database) == []
    set_pool("paused", 1)
    assert len(queue(migrated_database)) == 1


def test_a_task_whose_pool_does_not_exist_stays_scheduled_saying_why(migrated_database):
    scheduled(wide(1, pool="nowhere"))
    assert queue(migrated_database) == []
    assert states() == {"t0": ("scheduled", missing_pool_reason("nowhere"))}
    assert "pool 'nowhere' does not exist" in missing_pool_reason("nowhere")
    set_pool("nowhere", 1)
    assert queue(migrated_database) == ["t0"]
    assert states() == {"t0": ("queued", None)}


def test_deferred_tasks_hold_slots_only_in_pools_that_include_them(migrated_database):
    set_pool("one", 1)
    scheduled(wide(2, pool="one"))
    with orm.session_scope() as session:
        session.execute(text("UPDATE task_instance SET state = 'deferred' WHERE task_id = 't0'"))
    assert queue(migrated_database) == ["t1"]
    with orm.session_scope() as session:
        session.execute(text("UPDATE task_instance SET state = 'scheduled' WHERE task_id = 't1'"))
    set_pool("one", 1, include_deferred=True)
    assert queue(migrated_database) == []


def test_the_heaviest_task_is_queued_first_then_the_earliest_date_then_the_task_id(
    migrated_database,
):
    set_pool("one", 1)
    with Dag("weighted", max_active_tasks=100) as dag:
        for task_id, weight in (("light", 1), ("heavy", 9), ("b_mid", 5), ("a_mid", 5)):
            CommandTask(task_id, "true", pool="one", priority_weight=weight)
    scheduled(dag, day=2)
    scheduled(dag, day=1)
    order = []
    for _ in range(8):
        queued = queue(migrated_database)
        assert len(queued) == 1
        with orm.session_scope() as session:
            ti = session.scalars(select(TaskInstance).where(TaskInstance.state == "queued")).one()
            order.append((ti.task_id, session.get(DagRun, ti.dag_run_id).run_id))
            ti.state = TaskState.SUCCESS
    assert order == [("heavy", "run1"), ("heavy", "run2"), ("a_mid", "run1"), ("b_mid", "run1"),
                     ("a_mid", "run2"), ("b_mid", "run2"), ("light", "run1"),
                     ("light", "run2")]  # fmt: skip


def test_a_second_scheduler_waits_for_the_first_s_pool_lock_and_counts_what_it_queued(
    migrated_database, db_backend
):
    if db_backend == "sqlite":
        pytest.skip("SQLite has one writer at a time: no row locks to take")
    set_pool("two", 2)
    scheduled(wide(6, pool="two"))
    second_queued: list[str] = []

    def second_scheduler() -> None:
        with orm.session_scope() as session:
            second_queued.extend(
                w.task_id
                for w in queue_tasks(session, runs.DagBag(), migrated_database, 100, 2, NOW)
            )

    with orm.session_scope() as session:
        first = queue_tasks(session, runs.DagBag(), migrated_database, 100, 1, NOW)
        assert len(first) == 2
        thread = threading.Thread(target=second_scheduler)
        thread.start()
        # Deterministic interleaving: commit only once the second waits on the pool lock.
        waiting = waiting_on_a_lock_query(db_backend)
        with orm.engine().connect() as watcher:
            while not watcher.execute(text(waiting)).scalar():
                # PostgreSQL reads pg_stat_activity once per transaction: a poll inside the
                # first poll's transaction would never see the second scheduler start to wait.
                watcher.rollback()
                assert thread.is_alive(), "the second scheduler never waited on the pool lock"
                threading.Event().wait(0.05)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert second_queued == []


def waiting_on_a_lock_query(backend: str) -> str:
    if backend == "postgres":
        return ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()")  # fmt: skip
    # The first scheduler's lock query has returned: one still running is the second's,
    # waiting (MariaDB lists that wait in innodb_trx only once it has a transaction id).
    return ("SELECT count(*) FROM information_schema.processlist "
            "WHERE info LIKE 'SELECT pool.pool%FOR UPDATE'")  # fmt: skip
