"""The triggerer's writes against SQLite, PostgreSQL and MariaDB, row by row (no process):
events written twice, events of a trigger another triggerer took, state that travels with
an event, takeovers after an outage, a resumed try cut short, trigger ids never reused."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import delete, func, select

from spawnflow.bootstrap import orm
from spawnflow.comms.states import JobState, TaskState
from spawnflow.comms.triggers import TriggerFired
from spawnflow.models.assets import AssetEvent, AssetModel
from spawnflow.models.dag import DagModel
from spawnflow.models.job import Job
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.models.triggers import AssetStateValue, Trigger
from spawnflow.processors.scheduler import cut_short
from spawnflow.processors.triggerer import claims
from spawnflow.sdk import xcom

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def rows(migrated_database):
    """A triggerer job, a watched asset with its watcher's trigger, and a deferred task."""
    with orm.session_scope() as session:
        job = Job(job_type=claims.JOB_TYPE, state=JobState.RUNNING, pid=1, latest_heartbeat=NOW)
        asset = AssetModel(uri="file://w", uri_hash="h" * 64, name="file://w")
        session.add_all([job, asset, DagModel(dag_id="d", fileloc="/d.py")])
        session.flush()
        run = DagRun(dag_id="d", run_id="r", run_type="manual", state="running",
                     logical_date=NOW)  # fmt: skip
        watcher = Trigger(classpath="x.Y", kwargs="{}", asset_id=asset.id, watcher_name="w",
                          triggerer_id=job.id)  # fmt: skip
        task_trigger = Trigger(classpath="x.Y", kwargs="{}", triggerer_id=job.id)
        session.add_all([run, watcher, task_trigger])
        session.flush()
        ti = TaskInstance(dag_run_id=run.id, dag_id="d", task_id="t", state=TaskState.DEFERRED,
                          try_number=1, trigger_id=task_trigger.id, next_method="resume",
                          next_kwargs='{"note":1}')  # fmt: skip
        session.add(ti)
        session.flush()
        return {"job": job.id, "asset": asset.id, "watcher": watcher.id,
                "task_trigger": task_trigger.id, "ti": ti.id}  # fmt: skip


def fired(trigger_id: int, event_id: str = "e1", **extra) -> TriggerFired:
    return TriggerFired(trigger_id=trigger_id, payload='{"path":"a.csv"}', event_id=event_id,
                        **extra)  # fmt: skip


def submit(report: TriggerFired, triggerer: int) -> int:
    with orm.session_scope() as session:
        return claims.submit_event(session, report, triggerer, max_state_size=1000)


def count(model, *where) -> int:
    with orm.session_scope(write=False) as session:
        return session.scalar(select(func.count()).select_from(model).where(*where)) or 0


def test_a_watcher_event_written_twice_is_recorded_once_with_its_state(rows):
    state = {"seen": xcom.encode(["a.csv"])}
    assert submit(fired(rows["watcher"], state=state), rows["job"]) == 1
    assert submit(fired(rows["watcher"], state=state), rows["job"]) == 0  # its answer was lost

    assert count(AssetEvent) == 1
    with orm.session_scope(write=False) as session:
        extra = json.loads(session.scalar(select(AssetEvent.extra)))
        kept = session.scalar(select(AssetStateValue.value))
    assert extra == {"path": "a.csv", "watcher": "w"}
    assert xcom.decode(kept) == ["a.csv"]


def test_a_watcher_event_with_a_partition_key_is_an_asset_event_for_that_partition(rows):
    assert submit(fired(rows["watcher"], partition_key="2026-12-01"), rows["job"]) == 1
    with orm.session_scope(write=False) as session:
        assert session.scalar(select(AssetEvent.partition_key)) == "2026-12-01"


def test_state_larger_than_the_limit_is_left_out_but_the_event_is_recorded(rows):
    huge = {"seen": xcom.encode(["x" * 2000])}
    assert submit(fired(rows["watcher"], state=huge), rows["job"]) == 1
    assert count(AssetStateValue) == 0


def test_a_watcher_event_from_a_triggerer_that_lost_the_trigger_is_dropped(rows):
    assert submit(fired(rows["watcher"]), rows["job"] + 1) == 0
    assert count(AssetEvent) == 0


def test_a_task_event_resumes_its_task_once_and_the_trigger_goes(rows):
    assert submit(fired(rows["task_trigger"]), rows["job"]) == 1
    assert submit(fired(rows["task_trigger"], "e2"), rows["job"]) == 0  # fired again elsewhere
    with orm.session_scope(write=False) as session:
        ti = session.get(TaskInstance, rows["ti"])
        assert (ti.state, ti.trigger_id, ti.try_number) == ("scheduled", None, 1)
        assert xcom.decode(ti.next_kwargs) == {"note": 1, "event": {"path": "a.csv"}}
        assert session.get(Trigger, rows["task_trigger"]) is None


def test_after_an_outage_a_triggerer_takes_only_unheld_triggers(rows):
    with orm.session_scope() as session:  # the holder looks gone: no heartbeat for an hour
        session.get(Job, rows["job"]).latest_heartbeat = NOW - dt.timedelta(hours=1)
        other = Job(job_type=claims.JOB_TYPE, state=JobState.RUNNING, pid=2, latest_heartbeat=NOW)
        session.add(other)
        session.flush()
        other_id = other.id
    with orm.session_scope() as session:
        taken = claims.claim(session, other_id, 10, NOW, 30.0, take_over=False)
    assert taken == 0  # everyone missed heartbeats in the outage: nobody is taken over
    with orm.session_scope() as session:
        taken = claims.claim(session, other_id, 10, NOW, 30.0)
    assert taken == 2


def test_a_resumed_try_cut_short_runs_again_from_its_start(rows):
    with orm.session_scope() as session:
        scheduler = Job(job_type="scheduler", state=JobState.RUNNING, pid=3)
        session.add(scheduler)
        session.flush()
        ti = session.get(TaskInstance, rows["ti"])
        ti.state, ti.scheduler_job_id, ti.trigger_id = TaskState.RUNNING, scheduler.id, None
        job_id = scheduler.id
    with orm.session_scope() as session:
        assert cut_short.release(session, job_id, "stopped cold") == 1
    with orm.session_scope(write=False) as session:
        ti = session.get(TaskInstance, rows["ti"])
        assert (ti.state, ti.try_number, ti.next_method, ti.next_kwargs) == (
            "scheduled", 0, None, None
        )  # fmt: skip


def test_a_deleted_triggers_id_is_never_given_again(rows):
    with orm.session_scope() as session:
        newest = session.scalar(select(func.max(Trigger.id)))
        session.execute(delete(Trigger).where(Trigger.id == newest))
    with orm.session_scope() as session:
        again = Trigger(classpath="x.Y", kwargs="{}")
        session.add(again)
        session.flush()
        assert again.id > newest


def test_the_runner_passes_a_partition_key_on_and_drops_an_event_whose_key_is_unusable():
    from spawnflow.comms.triggers import RunTrigger
    from spawnflow.processors.triggerer import runner
    from spawnflow.sdk.triggers import TriggerEvent

    spec = RunTrigger(trigger_id=3, classpath="x.Y", kwargs="{}", owner="asset file://w",
                      asset_uri="file://w")  # fmt: skip
    sent = runner._fired(spec, TriggerEvent({"path": "a.csv"}, partition_key="2026-12-01"))
    assert sent is not None
    assert sent.partition_key == "2026-12-01"
    for unusable in ("", "k" * (runner.MAX_KEY + 1)):
        assert runner._fired(spec, TriggerEvent({}, partition_key=unusable)) is None
