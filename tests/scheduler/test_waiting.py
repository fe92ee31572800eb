"""The scheduler pass over waiting task instances, against each database: it skips a run
in which nothing changed, sees every change anyone makes, and decides a join after a
wide fan-out from counts in SQL exactly as it would from rows."""

from __future__ import annotations

import datetime as dt
from contextlib import contextmanager

import pytest
from sqlalchemy import event, select, update

from spawnflow.bootstrap import orm
from spawnflow.models.run import TaskInstance
from tests.scheduler import harness
from tests.scheduler.test_decisions_db import started_run

FANOUT = """
from spawnflow import CommandTask, Dag

with Dag("fanout"):
    root = CommandTask("root", "exit 0")
    join = CommandTask("join", "exit 0")
    for n in range({leaves}):
        root >> CommandTask(f"leaf{{n}}", "exit 0") >> join
"""


@contextmanager
def statements():
    """The SQL statements run on the engine meanwhile."""
    seen: list[str] = []

    def record(conn, cursor, statement, *args) -> None:
        seen.append(statement)

    event.listen(orm.engine(), "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(orm.engine(), "before_cursor_execute", record)


def reads_rows(seen: list[str]) -> bool:
    """Whether a statement read task instances one by one (not counted by state)."""
    return any(s.lstrip().startswith("SELECT task_instance.id") for s in seen)


def one_pass(bag, run_id, seen, now=None) -> int:
    from spawnflow.processors.scheduler import runs, waiting

    with orm.session_scope() as session:
        return waiting.schedule_tasks(session, bag, now or runs.utcnow(), {run_id}, seen)


def test_every_update_of_a_task_instance_raises_its_row_version(migrated_database):
    """Through the ORM and through an UPDATE statement alike: the mark a pass compares
    moves whoever writes the row."""
    from spawnflow.models.dag import DagModel
    from spawnflow.processors.scheduler import runs

    with orm.session_scope() as session:
        session.add(DagModel(dag_id="d", fileloc="d.py", is_paused=False, is_active=True))
        session.flush()
        run = runs.trigger_run(session, "d")
        ti = TaskInstance(dag_run_id=run.id, dag_id="d", task_id="t", state="none")
        session.add(ti)
        session.flush()
        ti_id = ti.id
    with orm.session_scope() as session:
        assert session.get(TaskInstance, ti_id).row_version == 0
        session.get(TaskInstance, ti_id).state = "scheduled"
    with orm.session_scope() as session:
        session.execute(update(TaskInstance).where(TaskInstance.id == ti_id).values(state="queued"))
    with orm.session_scope() as session:
        row = session.execute(
            select(TaskInstance.state, TaskInstance.row_version).where(TaskInstance.id == ti_id)
        ).one()
    assert tuple(row) == ("queued", 2)


def test_a_run_in_which_nothing_changed_is_not_read_again_until_something_does(
    database_url, make_settings, tmp_path
):
    """While the root runs, a second pass only counts the run's rows; the root's success,
    written by somebody else, is seen by the next pass, which schedules every leaf."""
    from spawnflow.processors.scheduler import waiting

    _, bag, run_id = started_run(database_url, make_settings, tmp_path,
                                 FANOUT.format(leaves=3), "fanout", root="running")  # fmt: skip
    seen = waiting.RunsSeen()
    assert one_pass(bag, run_id, seen) == 0  # looks: the first time it sees the run
    with statements() as ran:
        assert one_pass(bag, run_id, seen) == 0
    assert ran
    assert not reads_rows(ran), ran

    with orm.session_scope() as session:  # the supervisor's write, through the ORM
        ti = session.scalars(select(TaskInstance).where(
            TaskInstance.dag_run_id == run_id, TaskInstance.task_id == "root"
        )).one()  # fmt: skip
        ti.state = "success"
    with statements() as ran:
        assert one_pass(bag, run_id, seen) == 3
    assert reads_rows(ran)
    states = {t: ti.state for t, ti in harness.task_instances(run_id).items()}
    assert states == {
        "root": "success",
        "join": "none",
        **{f"leaf{n}": "scheduled" for n in range(3)},
    }
    # The pass wrote: the next one looks again (its own writes moved the mark), then not.
    one_pass(bag, run_id, seen)
    with statements() as ran:
        one_pass(bag, run_id, seen)
    assert not reads_rows(ran), ran


def test_a_retry_that_falls_due_is_scheduled_although_no_row_changed(
    database_url, make_settings, tmp_path
):
    from spawnflow.processors.scheduler import runs, waiting

    _, bag, run_id = started_run(
        database_url, make_settings, tmp_path, FANOUT.format(leaves=1), "fanout",
        root="up_for_retry",
    )  # fmt: skip
    due = runs.utcnow() + dt.timedelta(minutes=5)
    with orm.session_scope() as session:
        session.execute(update(TaskInstance).where(
            TaskInstance.dag_run_id == run_id, TaskInstance.task_id == "root"
        ).values(next_try_at=due))  # fmt: skip
    seen = waiting.RunsSeen()
    assert one_pass(bag, run_id, seen, now=due - dt.timedelta(minutes=1)) == 0
    with statements() as ran:
        assert one_pass(bag, run_id, seen, now=due - dt.timedelta(seconds=1)) == 0
    assert not reads_rows(ran)
    assert one_pass(bag, run_id, seen, now=due) == 1
    assert harness.task_instances(run_id)["root"].state == "scheduled"


@pytest.mark.parametrize(
    ("leaf_states", "join_state", "counted"),
    [
        ({}, "scheduled", True),  # every leaf succeeded
        ({"leaf7": "failed"}, "upstream_failed", True),
        # Two leaves unfinished, more than the root and the join could be: the run's
        # counts say that the join waits. With one, the leaves are counted.
        ({"leaf7": "running", "leaf8": "queued"}, "none", False),
        ({"leaf7": "running"}, "none", True),
        ({"leaf7": "running", "leaf8": "skipped"}, "skipped", True),
    ],
)
def test_a_join_after_a_wide_fan_out_is_decided_from_counts(
    database_url, make_settings, tmp_path, leaf_states, join_state, counted
):
    """The join waits on 100 leaves, more than a pass reads as rows: their states are
    counted in SQL, and the decision is the one the rows would give. While a leaf is
    surely unfinished and none failed or was skipped, the run's counts alone say that
    the join waits, and its leaves are not counted."""
    from spawnflow.processors.scheduler import waiting

    states = {f"leaf{n}": "success" for n in range(100)} | leaf_states
    _, bag, run_id = started_run(database_url, make_settings, tmp_path,
                                 FANOUT.format(leaves=100), "fanout", root="success",
                                 **states)  # fmt: skip
    with orm.session_scope() as session:
        assert len(bag.get(session, "fanout").task("join").upstream) > waiting._COUNT_ABOVE
    with statements() as ran:
        one_pass(bag, run_id, waiting.RunsSeen())
    assert any("count(" in s.lower() and "task_id" in s for s in ran) is counted, ran
    tis = harness.task_instances(run_id)
    assert tis["join"].state == join_state
    expected_run = "failed" if join_state == "upstream_failed" else "running"
    assert harness.run_state(run_id) == expected_run


def test_a_root_failure_reaches_the_join_through_counted_leaves_in_one_pass(
    database_url, make_settings, tmp_path
):
    """The leaves are decided upstream_failed in the pass that also decides the join:
    the counts read from SQL are corrected by the pass's own decisions."""
    from spawnflow.processors.scheduler import waiting

    _, bag, run_id = started_run(database_url, make_settings, tmp_path,
                                 FANOUT.format(leaves=100), "fanout", root="failed")  # fmt: skip
    assert one_pass(bag, run_id, waiting.RunsSeen()) == 102  # 100 leaves, the join, the run
    tis = harness.task_instances(run_id)
    assert {ti.state for task_id, ti in tis.items() if task_id != "root"} == {"upstream_failed"}
    assert harness.run_state(run_id) == "failed"


def test_a_join_is_not_held_back_by_rows_of_tasks_removed_from_its_dag(
    database_url, make_settings, tmp_path
):
    """Two tasks removed from the Dag while they ran keep rows that are unfinished: the
    run's counts then cannot tell that the join's leaves are all done, so they are
    counted, and the join runs."""
    from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
    from spawnflow.processors.scheduler import waiting

    with_extra = FANOUT.format(leaves=100) + (
        '    CommandTask("gone1", "exit 0")\n    CommandTask("gone2", "exit 0")\n'
    )
    states = {f"leaf{n}": "success" for n in range(100)}
    settings, bag, run_id = started_run(database_url, make_settings, tmp_path, with_extra,
                                        "fanout", root="success", gone1="running",
                                        gone2="queued", **states)  # fmt: skip
    (tmp_path / "dags" / "fanout.py").write_text(FANOUT.format(leaves=100))
    DagFileProcessorManager(settings).run(once=True)

    one_pass(bag, run_id, waiting.RunsSeen())

    tis = harness.task_instances(run_id)
    assert (tis["gone1"].state, tis["gone2"].state) == ("running", "queued")
    assert tis["join"].state == "scheduled"


MAPPED = """
from spawnflow import Dag, task

with Dag("mapped"):

    @task
    def numbers():
        return [1, 2, 3, 4]

    @task
    def double(x):
        return 2 * x

    @task
    def total(values):
        return sum(values)

    total(double.expand(x=numbers()))
"""


@pytest.mark.parametrize("first_pass_reads_every_row", [True, False])
def test_every_waiting_instance_of_a_mapped_task_is_decided_in_one_pass(
    database_url, make_settings, tmp_path, first_pass_reads_every_row
):
    """Rows of one task are decided each on its own: two instances due for a retry and
    one cleared among finished ones are all scheduled by one pass, whether the pass
    reads every row of the run (a scheduler that just started) or only the waiting ones."""
    from spawnflow.processors.scheduler import runs, waiting

    _, bag, run_id = started_run(database_url, make_settings, tmp_path, MAPPED, "mapped",
                                 numbers="running")  # fmt: skip
    seen = waiting.RunsSeen()
    if not first_pass_reads_every_row:  # the run is reconciled: next passes read less
        assert one_pass(bag, run_id, seen) == 0
    with orm.session_scope() as session:  # as if expanded, then partly run
        session.execute(update(TaskInstance).where(
            TaskInstance.dag_run_id == run_id, TaskInstance.task_id == "numbers"
        ).values(state="success"))  # fmt: skip
        (row,) = session.scalars(select(TaskInstance).where(
            TaskInstance.dag_run_id == run_id, TaskInstance.task_id == "double"))  # fmt: skip
        row.map_index, row.state = 0, "success"
        for index, state in ((1, "up_for_retry"), (2, "none"), (3, "up_for_retry")):
            session.add(TaskInstance(dag_run_id=run_id, dag_id="mapped", task_id="double",
                                     map_index=index, state=state, try_number=1))  # fmt: skip
    with statements() as ran:
        assert one_pass(bag, run_id, seen, now=runs.utcnow()) == 3
    assert reads_rows(ran)

    with orm.session_scope(write=False) as session:
        found = {(ti.task_id, ti.map_index): ti.state for ti in session.scalars(
            select(TaskInstance).where(TaskInstance.dag_run_id == run_id))}  # fmt: skip
    assert found == {("numbers", -1): "success", ("double", 0): "success",
                     ("double", 1): "scheduled", ("double", 2): "scheduled",
                     ("double", 3): "scheduled", ("total", -1): "none"}  # fmt: skip
