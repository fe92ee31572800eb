"""The scheduler's decisions against a database, with an executor that runs nothing.

The executor here is an in-process stand-in (it crosses no process boundary): it
accepts workloads and never runs them, so the limits and states can be read as the
scheduler left them.
"""

from __future__ import annotations

import datetime

import pytest
from sqlalchemy import func, select

from spawnflow.bootstrap import orm
from spawnflow.executors import BaseExecutor
from spawnflow.models.dag import DagModel
from spawnflow.models.job import Job
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
from spawnflow.processors.scheduler.job import Scheduler
from tests.scheduler import harness


class Holding(BaseExecutor):
    """Takes ``slots`` workloads and keeps them."""

    def __init__(self, slots: int):
        self.slots, self.held = slots, []

    def start(self) -> None:
        pass

    def free_slots(self) -> int:
        return self.slots - len(self.held)

    def queue(self, workload) -> None:
        self.held.append(workload)

    def events(self) -> list:
        return []

    def running(self) -> int:
        return 0  # it runs nothing

    def holds(self) -> set[int]:
        return {workload.ti_id for workload in self.held}

    def end(self, grace=None) -> list:
        return []  # it ran nothing, so nothing is left unfinished


def setup(make_settings, tmp_path, **extra):
    from spawnflow.models import schema

    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "limits.py").write_text(harness.LIMITS)
    settings = make_settings(**{
        "database.url": f"sqlite:///{tmp_path.as_posix()}/d.db",
        "core.dags_folder": str(tmp_path / "dags"), "core.load_examples": "false", **extra,
    })  # fmt: skip
    schema.reset()
    DagFileProcessorManager(settings).run(once=True)
    return settings


def count(model, *where) -> int:
    with orm.session_scope() as session:
        return session.scalar(select(func.count()).select_from(model).where(*where))


def test_paused_dags_get_no_runs_and_catchup_respects_max_active_runs(make_settings, tmp_path):
    settings = setup(make_settings, tmp_path)
    with orm.session_scope() as session:
        session.get(DagModel, "paused_daily").is_paused = True
    scheduler = Scheduler(settings, executor=Holding(0))
    scheduler.run(num_loops=5)
    assert count(DagRun, DagRun.dag_id == "paused_daily") == 0
    # Five hours to catch up, one run at a time.
    assert count(DagRun, DagRun.dag_id == "hourly_catchup") == 1


def test_max_active_tasks_and_parallelism_limit_what_is_queued(make_settings, tmp_path):
    settings = setup(make_settings, tmp_path, **{"core.parallelism": "5"})
    run_id = harness.trigger("narrow")
    executor = Holding(100)
    Scheduler(settings, executor=executor, only_runs={run_id}).run(num_loops=3)
    assert len(executor.held) == 3  # the Dag's max_active_tasks
    assert count(TaskInstance, TaskInstance.state == "queued") == 3

    harness.trigger("narrow")
    executor = Holding(100)
    Scheduler(settings, executor=executor).run(num_loops=3)
    assert count(TaskInstance, TaskInstance.state == "queued") == 5  # [core] parallelism


def _queued_by_a_scheduler_that_died(settings, run_id):
    """What a scheduler queued and then died without saying so, a while ago: the try
    number each workload carries by task instance id, and that scheduler's job id."""
    Scheduler(settings, executor=Holding(2), only_runs={run_id}).run(num_loops=2)
    with orm.session_scope() as session:
        queued = session.scalars(select(TaskInstance).where(TaskInstance.state == "queued")).all()
        old_job = queued[0].scheduler_job_id
        job = session.get(Job, old_job)
        job.state = "running"
        job.latest_heartbeat = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
        sent = {ti.id: ti.try_number + 1 for ti in queued}
    return sent, old_job


def test_what_a_stopped_scheduler_queued_is_scheduled_again(make_settings, tmp_path):
    settings = setup(make_settings, tmp_path, **{"scheduler.job_heartbeat_timeout": "1"})
    run_id = harness.trigger("narrow")
    sent, old_job = _queued_by_a_scheduler_that_died(settings, run_id)
    assert len(sent) == 2

    executor = Holding(0)
    Scheduler(settings, executor=executor, only_runs={run_id}).run(num_loops=1)

    assert count(TaskInstance, TaskInstance.state == "queued") == 0
    assert count(TaskInstance, TaskInstance.state == "scheduled") >= 2
    with orm.session_scope() as session:
        assert session.get(Job, old_job).state == "failed"


class Adopting(Holding):
    """Takes over whatever a gone scheduler queued, as the Celery executor does."""

    def adopt(self, queued: dict[int, int]) -> set[int]:
        self.adopted = dict(queued)
        return set(queued)


def test_an_executor_that_adopts_keeps_what_a_stopped_scheduler_queued(make_settings, tmp_path):
    settings = setup(make_settings, tmp_path, **{"scheduler.job_heartbeat_timeout": "1"})
    run_id = harness.trigger("narrow")
    sent, old_job = _queued_by_a_scheduler_that_died(settings, run_id)

    executor = Adopting(0)
    scheduler = Scheduler(settings, executor=executor, only_runs={run_id})
    scheduler.run(num_loops=1)

    assert executor.adopted == sent  # each with the try number its message carries
    with orm.session_scope() as session:
        owners = set(session.scalars(
            select(TaskInstance.scheduler_job_id).where(TaskInstance.state == "queued")
        ))  # fmt: skip
        assert owners == {scheduler.job_id}
        assert session.get(Job, old_job).state == "failed"


def test_a_scheduler_late_with_its_own_heartbeat_keeps_what_it_queued(make_settings, tmp_path):
    """On a busy machine a turn can outlast job_heartbeat_timeout: the scheduler's own
    check for gone schedulers must not take itself for one."""
    settings = setup(make_settings, tmp_path, **{"scheduler.job_heartbeat_timeout": "1"})
    run_id = harness.trigger("narrow")
    Scheduler(settings, executor=Holding(2), only_runs={run_id}).run(num_loops=1)
    with orm.session_scope() as session:
        (job_id,) = set(session.scalars(
            select(TaskInstance.scheduler_job_id).where(TaskInstance.state == "queued")
        ))  # fmt: skip
        job = session.get(Job, job_id)
        job.state = "running"  # as it was while it ran, its last beat long ago
        job.latest_heartbeat = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    late = Scheduler(settings, executor=Holding(0), only_runs={run_id})
    late.job_id = job_id

    late._adopt_or_reset()

    assert count(TaskInstance, TaskInstance.state == "queued") == 2
    with orm.session_scope() as session:
        assert session.get(Job, job_id).state == "running"


def test_a_changed_dag_retires_removed_tasks_and_adds_new_ones(make_settings, tmp_path):
    settings = setup(make_settings, tmp_path)
    run_id = harness.trigger("narrow")
    Scheduler(settings, executor=Holding(0), only_runs={run_id}).run(num_loops=1)
    assert set(harness.task_instances(run_id)) == {f"t{n}" for n in range(10)}

    changed = harness.LIMITS.replace("range(10)", "range(9)") + (
        "\n    CommandTask('t_new', 'true', dag=narrow_dag)\n"
    )
    changed = changed.replace('with Dag("narrow", max_active_tasks=3):',
                              'with Dag("narrow", max_active_tasks=3) as narrow_dag:')  # fmt: skip
    (tmp_path / "dags" / "limits.py").write_text(changed)
    DagFileProcessorManager(settings).run(once=True)
    Scheduler(settings, executor=Holding(0), only_runs={run_id}).run(num_loops=1)

    tis = harness.task_instances(run_id)
    assert (tis["t9"].state, tis["t9"].reason) == ("removed", "the task is no longer in the Dag")
    assert tis["t_new"].state in ("none", "scheduled")
    assert harness.run_state(run_id) == "running"


def test_the_dag_bag_reads_each_dag_once_per_session_and_follows_new_versions(
    make_settings, tmp_path
):
    from sqlalchemy import event

    from spawnflow.processors.scheduler.runs import DagBag

    settings = setup(make_settings, tmp_path)
    bag = DagBag()
    statements: list[str] = []
    event.listen(orm.engine(), "before_cursor_execute", lambda *a: statements.append(a[2]))
    with orm.session_scope() as session:
        first = bag.get(session, "narrow")
        before = len(statements)
        assert bag.get(session, "narrow") is first
        assert len(statements) == before  # the same unit of work asks the database once
    assert len(first.tasks) == 10

    (tmp_path / "dags" / "limits.py").write_text(harness.LIMITS.replace("range(10)", "range(4)"))
    DagFileProcessorManager(settings).run(once=True)
    with orm.session_scope() as session:
        assert len(bag.get(session, "narrow").tasks) == 4
        assert bag.get(session, "no_such_dag") is None


def test_a_cleared_running_task_waits_in_restarting_until_its_supervisor_lets_go(
    make_settings, tmp_path
):
    from spawnflow.services import runs as run_service

    settings = setup(make_settings, tmp_path, **{"scheduler.task_heartbeat_timeout": "5"})
    run_id = harness.trigger("narrow")
    Scheduler(settings, executor=Holding(0), only_runs={run_id}).run(num_loops=1)
    now = datetime.datetime.now(datetime.UTC)
    with orm.session_scope() as session:
        ti = session.scalar(select(TaskInstance).where(
            TaskInstance.dag_run_id == run_id, TaskInstance.task_id == "t0"
        ))  # fmt: skip
        ti.state, ti.try_number, ti.last_heartbeat = "running", 1, now
        run_name = session.get(DagRun, run_id).run_id

    run_service.clear("narrow", run_name, ["t0"])
    assert harness.task_instances(run_id)["t0"].state == "restarting"
    Scheduler(settings, executor=Holding(0), only_runs={run_id}).run(num_loops=1)
    assert harness.task_instances(run_id)["t0"].state == "restarting"  # not scheduled beside it

    with orm.session_scope() as session:  # its supervisor died without letting go
        ti = session.get(TaskInstance, harness.task_instances(run_id)["t0"].id)
        ti.last_heartbeat = now - datetime.timedelta(minutes=1)
    Scheduler(settings, executor=Holding(0), only_runs={run_id}).run(num_loops=1)
    assert harness.task_instances(run_id)["t0"].state == "none"


def started_run(database_url, make_settings, tmp_path, source: str, dag_id: str, **states):
    """A migrated database with the Dags of ``source``, a started run of ``dag_id`` whose
    task instances are in ``states`` (task id=state); the settings, a Dag bag, the run id."""
    from sqlalchemy import update

    from spawnflow.models import schema
    from spawnflow.processors.scheduler import runs

    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / f"{dag_id}.py").write_text(source)
    settings = make_settings(**{
        "database.url": database_url, "core.dags_folder": str(tmp_path / "dags"),
        "core.load_examples": "false",
    })  # fmt: skip
    schema.reset(database_url)
    DagFileProcessorManager(settings).run(once=True)
    bag = runs.DagBag()
    run_id = harness.trigger(dag_id)
    with orm.session_scope() as session:
        runs.start_queued_runs(session, bag, runs.utcnow(), {run_id})
        session.flush()
        for task_id, state in states.items():
            session.execute(update(TaskInstance).where(
                TaskInstance.dag_run_id == run_id, TaskInstance.task_id == task_id
            ).values(state=state))  # fmt: skip
    return settings, bag, run_id


CASCADE = """
from spawnflow import CommandTask, Dag

with Dag("cascade"):
    root = CommandTask("root", "exit 0")
    for n in range(300):
        root >> CommandTask(f"leaf{n}", "exit 0")
    root >> CommandTask("a", "exit 0") >> CommandTask("b", "exit 0")
"""


def test_one_pass_writes_its_decisions_together_and_sees_those_it_made(
    database_url, make_settings, tmp_path
):
    """A pass reads a run's task instances as rows, not ORM objects, and writes each kind
    of change with one statement (on PostgreSQL an id array, elsewhere IN): a root's
    failure reaches the 300 leaves and ``a``, and through ``a`` reaches ``b`` in the same
    pass, which ends the run."""
    from spawnflow.processors.scheduler import runs, waiting

    _, bag, run_id = started_run(database_url, make_settings, tmp_path, CASCADE, "cascade",
                                 root="failed")  # fmt: skip

    with orm.session_scope() as session:
        assert waiting.schedule_tasks(session, bag, runs.utcnow(), {run_id}) == 303
        loaded = [o for o in session.identity_map.values() if isinstance(o, TaskInstance)]
        assert loaded == []

    tis = harness.task_instances(run_id)
    downstream = {task_id: ti for task_id, ti in tis.items() if task_id != "root"}
    assert len(downstream) == 302
    assert {(ti.state, ti.reason) for ti in downstream.values()} == {
        ("upstream_failed", "an upstream task failed")
    }
    assert harness.run_state(run_id) == "failed"


RETIRING = """
from spawnflow import CommandTask, Dag

with Dag("retiring"):
    CommandTask("root", "exit 0")
    CommandTask("gone", "exit 0")
"""


def test_a_pass_does_not_end_a_run_on_a_change_somebody_else_overtook(
    database_url, db_backend, make_settings, tmp_path
):
    """The pass retires ``gone`` (no longer in the Dag) while another scheduler queues it
    (its copy of the Dag still has it): the guarded UPDATE leaves the queued row alone, and
    the run, whose other task succeeded, is not ended on the retirement that did not happen."""
    if db_backend == "sqlite":
        pytest.skip("SQLite has one writer: nobody can queue the task during the pass")
    import sqlalchemy as sa
    from sqlalchemy import event

    from spawnflow.processors.scheduler import runs, waiting

    settings, bag, run_id = started_run(database_url, make_settings, tmp_path, RETIRING,
                                        "retiring", root="success", gone="scheduled")  # fmt: skip
    (tmp_path / "dags" / "retiring.py").write_text(RETIRING.replace('CommandTask("gone"', "#"))
    DagFileProcessorManager(settings).run(once=True)

    other = sa.create_engine(database_url)  # the other scheduler, on its own connection
    overtaken: list[bool] = []

    def queue_it_first(conn, cursor, statement, *args) -> None:
        if statement.startswith("UPDATE task_instance") and not overtaken:
            overtaken.append(True)
            with other.begin() as theirs:
                theirs.execute(sa.text(
                    "UPDATE task_instance SET state = 'queued' "
                    "WHERE dag_run_id = :run AND task_id = 'gone'"
                ), {"run": run_id})  # fmt: skip

    event.listen(orm.engine(), "before_cursor_execute", queue_it_first)
    try:
        with orm.session_scope() as session:
            assert waiting.schedule_tasks(session, bag, runs.utcnow(), {run_id}) == 0
    finally:
        event.remove(orm.engine(), "before_cursor_execute", queue_it_first)
        other.dispose()
    assert overtaken == [True]
    assert harness.task_instances(run_id)["gone"].state == "queued"
    assert harness.run_state(run_id) == "running"


class LosingItsWorker(Holding):
    """Starts what it is given (as a worker would: running, try 1), then reports the
    worker that ran it lost."""

    def queue(self, workload) -> None:
        super().queue(workload)
        with orm.session_scope() as session:
            ti = session.get(TaskInstance, workload.ti_id)
            ti.state, ti.try_number = "running", workload.try_number

    def events(self) -> list:
        from spawnflow.executors import WorkerLost

        lost = [WorkerLost(workload, "its executor worker (pid 1) ended") for workload in self.held]
        self.held = []
        return lost


def test_a_second_stop_request_while_a_lost_worker_is_written_queues_its_task_again(
    make_settings, tmp_path, monkeypatch
):
    """The second Ctrl-C can land while the scheduler writes what a lost worker ran (the
    stop reached the worker first): that task was cut short by the same stop. It is
    queued again with the reason, its try not counted, never left ``running``."""
    from spawnflow.bootstrap import lifecycle

    settings = setup(make_settings, tmp_path)
    run_id = harness.trigger("narrow")

    def interrupted(self, event) -> None:
        raise lifecycle.WarmStop()  # the second request, raised in the main thread

    monkeypatch.setattr(Scheduler, "_lost", interrupted)
    scheduler = Scheduler(settings, executor=LosingItsWorker(1), only_runs={run_id})
    with pytest.raises(lifecycle.WarmStop):
        scheduler.run(num_loops=3)

    rows = {
        (ti.state, ti.try_number, ti.reason)
        for ti in harness.task_instances(run_id).values() if ti.state != "scheduled" or ti.reason
    }  # fmt: skip
    why = "its scheduler stopped before the task finished (a cold stop); queued again"
    assert rows == {("scheduled", 0, why)}


def test_a_second_stop_request_that_cuts_a_write_short_leaves_no_lock_behind(
    make_settings, tmp_path, monkeypatch
):
    """Raised inside SQLAlchemy, the second request can skip a unit of work's rollback:
    its connection stays open, in its transaction, kept alive by the traceback. On
    SQLite that is the write lock, which the scheduler then waited for itself when it
    recorded that it stopped (seen under load: the task left ``running``). What the
    write was in the middle of is rolled back, and the stop is recorded."""
    from sqlalchemy import update

    from spawnflow.bootstrap import lifecycle

    # Short waits, so that the lock, if left, fails the test soon.
    settings = setup(make_settings, tmp_path, **{"database.sqlite_busy_timeout": "1",
                                                 "database.outage_tolerance": "1"})  # fmt: skip
    run_id = harness.trigger("narrow")

    def interrupted(self, event) -> None:
        connection = orm.engine().connect()  # what the traceback keeps alive
        connection.begin()
        connection.execute(update(TaskInstance).values(reason="half-written"))
        raise lifecycle.WarmStop()  # the second request, mid-write

    monkeypatch.setattr(Scheduler, "_lost", interrupted)
    scheduler = Scheduler(settings, executor=LosingItsWorker(1), only_runs={run_id})
    with pytest.raises(lifecycle.WarmStop):
        scheduler.run(num_loops=3)

    reasons = {ti.reason for ti in harness.task_instances(run_id).values()}
    assert "half-written" not in reasons
    why = "its scheduler stopped before the task finished (a cold stop); queued again"
    assert why in reasons
