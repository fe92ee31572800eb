"""Asset-scheduled Dags end to end: producers' outlets and outside events wake the
scheduler, which runs the consumers whose conditions hold. On SQLite, PostgreSQL and
MariaDB, under each start method."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from spawnflow.bootstrap import orm
from spawnflow.comms.states import RunType
from spawnflow.models.assets import AssetWakeRequest
from spawnflow.models.run import DagRun
from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
from spawnflow.processors.scheduler.job import Scheduler
from tests.assets import parsed_project
from tests.commands.test_cli import run
from tests.scheduler import harness

pytestmark = pytest.mark.process

DAGS = """
import json
from pathlib import Path
from spawnflow import Asset, Dag, get_current_context, task

MARKS = Path({marks!r})
RAW = Asset("file:///data/raw.csv")
CLEAN = Asset("s3://bucket/clean", name="clean", group="tables")

with Dag("produce_raw"):
    @task(outlets=[RAW])
    def write_raw():
        pass

    write_raw()

with Dag("produce_clean"):
    @task(outlets=[CLEAN])
    def write_clean():
        pass

    write_clean()

for dag_id, condition in (("needs_both", RAW & CLEAN), ("needs_either", RAW | CLEAN)):
    with Dag(dag_id, schedule=condition):
        @task(task_id="record")
        def record(dag_id=dag_id):
            context = get_current_context()
            events = context["triggering_asset_events"]
            seen = {{uri: [e["source_dag_id"] for e in found] for uri, found in events.items()}}
            with open(MARKS / dag_id, "a") as marks:
                marks.write(json.dumps(seen, sort_keys=True) + "\\n")

        record()
"""


@pytest.fixture
def assets_project(start_method, make_settings, tmp_path, database_url):
    """Settings over the asset Dags, parsed into a fresh database; the marks folder."""
    text = DAGS.format(marks="{marks}")
    return parsed_project(make_settings, tmp_path, database_url, start_method, "assets.py", text)


def asset_runs(dag_id: str) -> list[tuple[str, str]]:
    with orm.session_scope() as session:
        return [
            (r.run_type, r.state)
            for r in session.scalars(
                select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id)
            )
        ]


def recorded(marks: Path, dag_id: str) -> list[dict]:
    path = marks / dag_id
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_until(settings, done) -> None:
    """Run a scheduler until ``done()``, failing the test after a generous bound."""
    check = harness.deadline(180)
    Scheduler(settings).run(until=lambda: check() or done())


def test_consumers_run_when_their_condition_holds(assets_project):
    settings, marks, _ = assets_project
    harness.trigger("produce_raw")
    run_until(settings, lambda: len(recorded(marks, "needs_either")) == 1)
    # RAW alone: "either" ran with RAW's event, "both" waits for CLEAN.
    assert recorded(marks, "needs_either") == [{"file:///data/raw.csv": ["produce_raw"]}]
    assert asset_runs("needs_both") == []

    harness.trigger("produce_clean")
    run_until(settings, lambda: asset_runs("needs_both") == [(RunType.ASSET_TRIGGERED, "success")]
              and len(recorded(marks, "needs_either")) == 2)  # fmt: skip
    # "both" saw RAW's event from before and CLEAN's now; "either" ran again, for CLEAN.
    assert recorded(marks, "needs_both") == [
        {"file:///data/raw.csv": ["produce_raw"], "s3://bucket/clean": ["produce_clean"]}
    ]
    assert recorded(marks, "needs_either")[1] == {"s3://bucket/clean": ["produce_clean"]}
    with orm.session_scope() as session:  # every request was answered
        assert session.scalar(select(func.count()).select_from(AssetWakeRequest)) == 0


def test_an_event_from_outside_triggers_the_consumers(assets_project):
    settings, marks, env = assets_project
    listed = run("assets", "list", env=env)
    assert listed.exit_code == 0, listed.output
    raw = next(line for line in listed.stdout.splitlines() if line.startswith("file:///data/raw"))
    assert raw.split()[-4:] == ["produce_raw", "needs_both,", "needs_either", "0"]

    sent = run("assets", "event", "s3://bucket/clean", "--extra", '{"rows": 3}', env=env)
    assert sent.exit_code == 0, sent.output
    run_until(settings, lambda: len(recorded(marks, "needs_either")) == 1)
    assert recorded(marks, "needs_either") == [{"s3://bucket/clean": [None]}]
    assert asset_runs("needs_both") == []

    events = run("assets", "events", "s3://bucket/clean", env=env)
    assert '{"rows": 3}' in events.stdout
    assert "(outside)" in events.stdout


def test_an_event_for_an_unknown_asset_or_with_bad_extra_is_one_sentence(assets_project):
    from tests.commands.test_cli import assert_user_error

    _, _, env = assets_project
    unknown = run("assets", "event", "s3://nobody/uses/this", env=env)
    assert_user_error(unknown, "No asset 's3://nobody/uses/this' is known")
    bad = run("assets", "event", "s3://bucket/clean", "--extra", "[1]", env=env)
    assert_user_error(bad, "--extra '[1]' must be a JSON object")
    assert asset_runs("needs_either") == []


def triggered_by(dag_id: str) -> list[list[str]]:
    """For each run of ``dag_id``, oldest first, the URIs of the events that triggered it."""
    from spawnflow.processors.scheduler.asset_runs import triggering_events

    with orm.session_scope() as session:
        ids = session.scalars(select(DagRun.id).where(DagRun.dag_id == dag_id).order_by(DagRun.id))
        return [sorted(triggering_events(session, run_id)) for run_id in ids]


def test_an_event_written_while_its_pending_run_is_evaluated_is_not_lost(
    db_backend, database_url, make_settings, tmp_path, monkeypatch
):
    """The event arrives after the evaluation read the pending run's key log and before
    it fired: the run fires without it, and the event makes the next run."""
    if db_backend == "sqlite":
        pytest.skip("SQLite has one writer: nothing is written while the scheduler evaluates")
    from spawnflow.models import schema
    from spawnflow.models.assets import PendingAssetEvent, PendingAssetRun
    from spawnflow.processors.scheduler import asset_runs, runs
    from spawnflow.sdk.assets import AssetCondition
    from spawnflow.services import assets as service

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "assets.py").write_text(DAGS.format(marks=str(tmp_path)))
    settings = make_settings(**{"database.url": database_url, "core.dags_folder": str(dags),
                                "core.load_examples": "false"})  # fmt: skip
    schema.reset(database_url)
    DagFileProcessorManager(settings).run(once=True)
    service.record_event("file:///data/raw.csv", None, None)

    evaluate, written = AssetCondition.evaluate, []

    def evaluate_while_an_event_arrives(condition, seen):
        if condition.kind == "any" and not written:  # needs_either, its key log read
            service.record_event("s3://bucket/clean", None, None)  # another connection
            written.append(True)
        return evaluate(condition, seen)

    monkeypatch.setattr(AssetCondition, "evaluate", evaluate_while_an_event_arrives)
    bag = runs.DagBag()
    for _ in range(2):  # the loop that fires, and the one that answers the late request
        with orm.session_scope() as session:
            asset_runs.evaluate_requested(session, bag, runs.utcnow(), 500)

    assert written
    assert triggered_by("needs_either") == [["file:///data/raw.csv"], ["s3://bucket/clean"]]
    assert triggered_by("needs_both") == [["file:///data/raw.csv", "s3://bucket/clean"]]
    with orm.session_scope() as session:
        for table in (AssetWakeRequest, PendingAssetEvent, PendingAssetRun):
            assert session.scalar(select(func.count()).select_from(table)) == 0, table


def test_a_key_log_written_behind_the_orms_back_is_found_by_a_resync_pass(assets_project):
    """No wake request (a Core insert skips the ORM's event): the start-up pass finds
    it, and so does the next periodic one."""
    from sqlalchemy import insert

    from spawnflow.bootstrap import metrics
    from spawnflow.models import asset_events
    from spawnflow.models.assets import AssetEvent, PendingAssetEvent
    from spawnflow.processors.scheduler import asset_runs, runs

    def written_behind_the_back() -> None:
        with orm.session_scope() as session:
            requests = session.scalar(select(func.count()).select_from(AssetWakeRequest))
            asset = asset_events.find_asset(session, "file:///data/raw.csv")
            event = AssetEvent(asset_id=asset.id, extra="{}")
            session.add(event)
            session.flush()
            pending = asset_events.pending_run_for(session, "needs_either", "")
            session.execute(insert(PendingAssetEvent).values(
                pending_run_id=pending.id, dag_id="needs_either", partition_key="",
                asset_id=asset.id, asset_event_id=event.id, created_at=runs.utcnow(),
            ))  # fmt: skip
            count = session.scalar(select(func.count()).select_from(AssetWakeRequest))
            assert count == requests  # no request of its own

    def one_loop() -> None:
        with orm.session_scope() as session:
            scheduling.loop(session, bag, runs.utcnow())
        scheduling.committed()

    bag = runs.DagBag()
    with orm.session_scope() as session:  # the Dag processor's requests, answered
        asset_runs.evaluate_requested(session, bag, runs.utcnow(), 500)
    scheduling = asset_runs.AssetScheduling(budget=500, resync_interval=0)
    fired = "scheduler.asset_partitions.resync_fired"
    before = {why: metrics.total(fired, **{"pass": why}) for why in ("startup", "periodic")}
    written_behind_the_back()
    one_loop()  # the start-up pass
    assert asset_runs_of("needs_either") == 1
    assert metrics.total(fired, **{"pass": "startup"}) == before["startup"] + 1

    written_behind_the_back()
    one_loop()  # an interval of 0: the next pass starts now
    assert asset_runs_of("needs_either") == 2
    assert metrics.total(fired, **{"pass": "periodic"}) == before["periodic"] + 1
    assert asset_runs_of("needs_both") == 0  # RAW alone is not enough for it


def asset_runs_of(dag_id: str) -> int:
    with orm.session_scope() as session:
        return session.scalar(select(func.count()).where(DagRun.dag_id == dag_id)) or 0


def test_requests_of_a_paused_dag_wait_merged_and_those_of_a_deleted_dag_go(assets_project):
    from spawnflow.models.assets import PendingAssetEvent
    from spawnflow.models.dag import DagModel
    from spawnflow.processors.scheduler import asset_runs, runs
    from spawnflow.services import assets as service

    def requests_of(dag_id: str) -> int:
        with orm.session_scope() as session:
            return session.scalar(select(func.count()).where(AssetWakeRequest.dag_id == dag_id))

    def loop() -> None:
        with orm.session_scope() as session:
            scheduling.loop(session, bag, runs.utcnow())
        scheduling.committed()

    def set_dag(dag_id: str, **values) -> None:
        with orm.session_scope() as session:
            model = session.get(DagModel, dag_id)
            for name, value in values.items():
                setattr(model, name, value)

    bag, scheduling = runs.DagBag(), asset_runs.AssetScheduling(budget=500, resync_interval=0)
    loop()  # the Dag processor's requests answered
    set_dag("needs_either", is_paused=True)
    for _ in range(3):
        service.record_event("file:///data/raw.csv", None, None)
    loop()
    assert asset_runs_of("needs_either") == 0  # paused: its requests wait...
    loop()  # ...merged into one by the next pass
    assert requests_of("needs_either") == 1
    set_dag("needs_either", is_paused=False)
    loop()
    assert asset_runs_of("needs_either") == 1
    assert requests_of("needs_either") == 0

    service.record_event("s3://bucket/clean", None, None)  # needs_both is complete, but
    with orm.session_scope() as session:  # its Dag is deleted before a loop sees it
        session.delete(session.get(DagModel, "needs_both"))
    loop()
    assert requests_of("needs_both") == 0
    assert asset_runs_of("needs_both") == 0
    with orm.session_scope() as session:
        left = select(func.count()).where(PendingAssetEvent.dag_id == "needs_both")
        assert session.scalar(left) == 0
