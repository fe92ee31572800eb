"""XCom backends end to end: the scheduler, executor workers, supervisors, task processes
and XCom helpers, under each start method, on SQLite."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.models.run import XCom
from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
from spawnflow.processors.scheduler.job import Scheduler
from spawnflow.services import runs as run_service
from tests.commands.test_cli import assert_user_error, run
from tests.scheduler import harness

pytestmark = pytest.mark.process

MISBEHAVING = "tests.fixtures.xcom_backends:MisbehavingBackend"

DAGS = """
import asyncio, threading, time
from pathlib import Path
from spawnflow import Connection, Dag, task, xcom_pull, xcom_push, xcom_push_async

GATE = Path({gate!r})


def held_until_released(context):
    (GATE.parent / "callback-running").write_text("")
    while not (GATE.parent / "callback-released").exists():
        time.sleep(0.05)


def hang(context):
    threading.Event().wait()


with Dag("around_execute"):
    @task(execution_timeout=5, on_execute_callback=held_until_released)
    def returns_slowly_stored():  # the backend holds its return value too
        return "kept"

    returns_slowly_stored()


with Dag("hanging_return"):
    @task(execution_timeout=5)
    def returns_into_a_hang():  # the backend never stores its return value
        return "lost"

    returns_into_a_hang()


with Dag("hanging_callback"):
    @task(execution_timeout=5, on_execute_callback=hang)
    def never_executes():
        return "never"

    never_executes()

with Dag("passing"):
    @task
    def produce():
        return {{"rows": list(range(50)), "name": "x" * 2000}}

    @task
    def consume(data):
        return len(data["rows"])

    consume(produce())


with Dag("overlapping"):
    @task
    async def several():
        pushes = [xcom_push_async(f"slow_{{n}}", n) for n in range(3)]
        await asyncio.gather(*pushes, xcom_push_async("fast", "f"))
        return "pushed"

    @task
    def read_them():
        return [xcom_pull("several", f"slow_{{n}}") for n in range(3)] + [
            xcom_pull("several", "fast")]

    several() >> read_them()


with Dag("refused"):
    @task
    def refuse():
        xcom_push("refuse", 1)

    refuse()


with Dag("connected"):
    @task
    def read_connection():
        warehouse = Connection.get("xcom_store")
        xcom_push("with_connection", warehouse.host)  # the backend reads it too
        return [warehouse.conn_type, warehouse.host, warehouse.port, warehouse.extra]

    read_connection()


with Dag("hanging"):
    @task(execution_timeout=3)
    def push_into_a_hanging_backend():
        xcom_push("hang", 1)

    push_into_a_hanging_backend()


with Dag("held"):
    @task
    def push_into_a_held_backend():
        xcom_push("hold", 1)

    push_into_a_held_backend()


with Dag("replacing"):
    @task
    def push_twice():
        xcom_push("twice", "first")
        xcom_push("twice", "second")

    push_twice()


with Dag("hostile"):
    @task
    def push_them():
        for key in ("wrong_type", "huge", "unpurgeable"):
            xcom_push(key, "a value")

    @task
    def pull_wrong_type():
        return xcom_pull("push_them", "wrong_type")

    @task
    def pull_huge():
        return xcom_pull("push_them", "huge")

    @task
    def replace_unpurgeable():
        xcom_push("unpurgeable", "first")
        xcom_push("unpurgeable", "second")

    @task
    def push_long_reference():
        xcom_push("long_reference", "a value")

    push_them() >> [pull_wrong_type(), pull_huge()]
    replace_unpurgeable()
    push_long_reference()


with Dag("lost"):
    @task
    def keep():
        return "kept"

    @task
    def use_later():
        while not GATE.exists():
            time.sleep(0.05)
        return xcom_pull("keep")

    keep() >> use_later()
"""


@pytest.fixture
def xcom_run(start_method, make_settings, tmp_path):
    """A function that sets up settings for ``backend`` and runs one Dag to its end."""
    return dag_runner(
        start_method, make_settings, tmp_path, f"sqlite:///{tmp_path.as_posix()}/x.db"
    )


def dag_runner(start_method, make_settings, tmp_path, url):
    from spawnflow.models import schema

    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "xcom_dags.py").write_text(DAGS.format(gate=str(tmp_path / "gate")))
    values = {
        "database.url": url, "core.dags_folder": str(tmp_path / "dags"),
        "core.load_examples": "false", "core.mp_start_method": start_method,
        "executor.parallelism": "2", "executor.heartbeat_interval": "0.2",
        "scheduler.loop_interval": "0.1", "xcom.objectstorage_path": (tmp_path / "xcoms").as_uri(),
    }  # fmt: skip

    def run_dag(dag_id: str, backend: str = MISBEHAVING, on_loop=None, before=None,
                **extra) -> tuple:  # fmt: skip
        settings = make_settings(**{**values, "core.xcom_backend": backend, **extra})
        schema.reset(url)
        DagFileProcessorManager(settings).run(once=True)
        if before is not None:
            before()
        run_id = harness.trigger(dag_id)
        check = harness.deadline(180)
        Scheduler(settings, only_runs={run_id}, on_loop=on_loop).run(until=lambda: check(run_id))
        return run_id, harness.task_instances(run_id)

    run_dag.env = {"SPAWNFLOW__" + k.upper().replace(".", "__"): v for k, v in values.items()}
    return run_dag


def rows(run_id: int) -> dict[tuple[str, str], XCom]:
    tis = {ti.id: ti.task_id for ti in harness.task_instances(run_id).values()}
    with orm.session_scope() as session:
        found = session.scalars(select(XCom).where(XCom.task_instance_id.in_(tis))).all()
    return {(tis[row.task_instance_id], row.key): row for row in found}


def helper_pids(ti) -> list[int]:
    """The XCom helpers a try's supervisor started, from the try's log."""
    log = Path(ti_log(ti)).read_text().splitlines()
    events = [json.loads(line) for line in log]
    return [e["helper_pid"] for e in events if e.get("event") == "xcom helper started"]


def ti_log(ti) -> str:
    from spawnflow.bootstrap import settings as settings_module
    from spawnflow.services.runs import log_path

    path, _ = log_path(settings_module.current(), ti.dag_id, _run_name(ti), ti.task_id, None)
    return str(path)


def _run_name(ti) -> str:
    from spawnflow.models.run import DagRun

    with orm.session_scope() as session:
        return session.get(DagRun, ti.dag_run_id).run_id


def test_values_go_through_the_helper_to_object_storage_and_back(xcom_run, tmp_path):
    run_id, tis = xcom_run("passing")
    assert {t: ti.state for t, ti in tis.items()} == {"produce": "success", "consume": "success"}
    stored = rows(run_id)
    produce = stored[("produce", "return_value")]
    assert produce.value is None
    assert produce.reference.startswith((tmp_path / "xcoms").as_uri() + "/passing/")
    assert list((tmp_path / "xcoms").rglob("return_value-*.json"))
    # The worker never loaded the backend's module; each task's helper did (the
    # module leaves a mark per importing process, see tests/fixtures/xcom_backends.py).
    marks = tmp_path / "xcoms" / "import-marks"
    for ti in tis.values():
        pids = helper_pids(ti)
        assert len(pids) == 1
        assert (marks / str(pids[0])).exists()
        assert not (marks / str(ti.worker_pid)).exists()
    assert harness.task_instances(run_id)["consume"].state == "success"


def test_the_threshold_keeps_small_values_in_the_database(xcom_run, tmp_path):
    run_id, tis = xcom_run("passing", **{"xcom.objectstorage_threshold": "1000"})
    assert all(ti.state == "success" for ti in tis.values())
    stored = rows(run_id)
    assert stored[("consume", "return_value")].reference is None  # "50": 2 bytes
    assert stored[("consume", "return_value")].value == "50"
    assert stored[("produce", "return_value")].reference is not None  # over 2000 bytes


def test_tasks_on_the_default_backend_start_no_helper(xcom_run):
    run_id, tis = xcom_run("passing", backend="database")
    assert all(ti.state == "success" for ti in tis.values())
    assert all(row.reference is None for row in rows(run_id).values())
    assert [helper_pids(ti) for ti in tis.values()] == [[], []]


def test_overlapping_pushes_of_an_async_task_each_get_their_own_answer(xcom_run):
    run_id, tis = xcom_run("overlapping")
    assert {t: ti.state for t, ti in tis.items()} == {"several": "success", "read_them": "success"}
    stored = rows(run_id)
    for n in range(3):
        assert f"/slow_{n}-" in stored[("several", f"slow_{n}")].reference
    from spawnflow.sdk import xcom as codec
    from spawnflow.services.xcoms import list_xcoms

    run_name = _run_name(tis["read_them"])
    entries = list_xcoms(harness_settings(), "overlapping", run_name, "read_them")
    assert [codec.encode(e.value) for e in entries] == ['[0,1,2,"f"]']


def harness_settings():
    from spawnflow.bootstrap import settings as settings_module

    return settings_module.current()


def test_a_value_the_backend_cannot_store_fails_the_task_and_leaves_no_row(xcom_run):
    run_id, tis = xcom_run("refused")
    assert tis["refuse"].state == "failed"
    assert "could not store XCom 'refuse' of task 'refuse'" in tis["refuse"].reason
    assert "refuses the key 'refuse' on purpose" in tis["refuse"].reason
    assert rows(run_id) == {}


def test_a_stored_object_deleted_behind_its_back_fails_the_pull_clearly(xcom_run, tmp_path):
    def delete_then_open_the_gate(_summary) -> None:
        if (tmp_path / "gate").exists():
            return
        with orm.session_scope() as session:
            row = session.scalars(select(XCom).where(XCom.key == "return_value")).first()
        if row is not None:
            for found in (tmp_path / "xcoms").rglob("return_value-*"):
                found.unlink()
            (tmp_path / "gate").write_text("open")

    _run_id, tis = xcom_run("lost", on_loop=delete_then_open_the_gate)
    assert tis["keep"].state == "success"
    assert tis["use_later"].state == "failed"
    assert "which no longer exists" in tis["use_later"].reason
    assert "could not load XCom 'return_value' of task 'keep'" in tis["use_later"].reason


def test_clearing_a_task_purges_its_stored_objects(xcom_run, tmp_path):
    run_id, tis = xcom_run("passing")
    run_name = _run_name(tis["produce"])
    assert len(list((tmp_path / "xcoms").rglob("*.json"))) == 2
    cleared = run_service.clear("passing", run_name, ["produce"])
    assert cleared.purge_failures == []
    left = [p.name for p in (tmp_path / "xcoms").rglob("*.json")]
    assert len(left) == 1  # consume's value stays
    assert ("produce", "return_value") not in rows(run_id)


def test_xcom_list_and_get_show_resolved_values_and_where_they_are_kept(xcom_run, tmp_path):
    _run_id, tis = xcom_run("passing", **{"xcom.objectstorage_threshold": "1000"})
    env = {**xcom_run.env, "SPAWNFLOW__CORE__XCOM_BACKEND": MISBEHAVING,
           "SPAWNFLOW__XCOM__OBJECTSTORAGE_THRESHOLD": "1000"}  # fmt: skip
    run_name = _run_name(tis["produce"])
    listed = run("xcom", "list", "passing", run_name, env=env)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    produce = next(line for line in lines if line.startswith("produce"))
    assert (tmp_path / "xcoms").as_uri() in produce
    assert "{'rows': [0, 1, 2" in produce
    consume = next(line for line in lines if line.startswith("consume"))
    assert "database" in consume
    assert consume.rstrip().endswith("50")

    got = run("xcom", "get", "passing", run_name, "produce", env=env)
    assert got.exit_code == 0, got.output
    assert got.stdout.splitlines()[0].startswith("stored in: " + (tmp_path / "xcoms").as_uri())
    assert "'name': 'xxxx" in got.stdout

    missing = run("xcom", "get", "passing", run_name, "produce", "nope", env=env)
    assert_user_error(missing, "has no XCom 'nope'")


HOSTILE = "tests.fixtures.xcom_backends:Hostile"


def test_a_backend_that_gives_back_the_wrong_thing_fails_the_pull_with_its_kind(xcom_run):
    _run_id, tis = xcom_run("hostile", backend=HOSTILE)
    assert tis["push_them"].state == "success"
    for task_id, kind, cause in (
        ("pull_wrong_type", "XCOM_BACKEND_ERROR", "load() returned a str, not bytes"),
        ("pull_huge", "XCOM_TOO_LARGE", "[core] max_xcom_size is 1048576"),
    ):
        reason = tis[task_id].reason
        assert tis[task_id].state == "failed", reason
        assert f"{kind}: the XCom backend {HOSTILE} could not load XCom" in reason
        assert cause in reason


def test_a_replaced_value_the_backend_cannot_delete_fails_the_push_naming_it(xcom_run):
    run_id, tis = xcom_run("hostile", backend=HOSTILE)
    reason = tis["replace_unpurgeable"].reason
    assert tis["replace_unpurgeable"].state == "failed"
    kept = rows(run_id)[("replace_unpurgeable", "unpurgeable")]
    assert stored_text(Path(kept.reference.removeprefix("file://"))) == '"second"'
    assert "XCOM_BACKEND_ERROR: XCom 'unpurgeable' of task 'replace_unpurgeable' was " in reason
    assert "but the value it replaces is left at file://" in reason
    assert "this backend never deletes 'unpurgeable'" in reason


def test_tasks_clear_that_cannot_delete_a_stored_value_says_so_and_exits_non_zero(xcom_run):
    run_id, tis = xcom_run("hostile", backend=HOSTILE)
    env = {**xcom_run.env, "SPAWNFLOW__CORE__XCOM_BACKEND": HOSTILE}
    cleared = run("tasks", "clear", "hostile", _run_name(tis["push_them"]), "push_them", env=env)
    error = assert_user_error(cleared, "could not delete 1 stored value(s), left in place: ")
    assert "unpurgeable" in error
    assert "XCOM_BACKEND_ERROR" in error
    assert harness.task_instances(run_id)["push_them"].state == "none"  # cleared all the same


def test_a_backend_that_cannot_load_stops_the_scheduler_at_start_up(xcom_run, make_settings):
    from spawnflow import xcoms

    with pytest.raises(xcoms.BackendError, match="module 'no_such_backend_module'"):
        xcom_run("passing", backend="no_such_backend_module:Backend")


def test_a_backend_whose_class_says_in_helper_false_runs_in_the_worker(xcom_run, tmp_path):
    run_id, tis = xcom_run("passing", backend="tests.fixtures.xcom_backends:RunsInWorker")
    assert all(ti.state == "success" for ti in tis.values())
    assert [helper_pids(ti) for ti in tis.values()] == [[], []]
    assert all(row.reference is None for row in rows(run_id).values())
    marks = tmp_path / "xcoms" / "import-marks"
    assert all((marks / str(ti.worker_pid)).exists() for ti in tis.values())


def test_tasks_and_their_xcom_helper_read_connections_through_the_supervisor(xcom_run):
    from spawnflow.sdk import Connection
    from spawnflow.services import connections

    def add() -> None:
        connections.add_connection(Connection(
            conn_id="xcom_store", conn_type="s3", host="warehouse.example", port=9000,
            schema="from_connection", extra={"region": "eu"},
        ))  # fmt: skip

    run_id, tis = xcom_run("connected", before=add)
    assert tis["read_connection"].state == "success", tis["read_connection"].reason
    stored = rows(run_id)
    assert "/from_connection/" in stored[("read_connection", "with_connection")].reference
    from spawnflow.services.xcoms import list_xcoms

    values = {e.key: e.value for e in list_xcoms(harness_settings(), "connected",
                                                   _run_name(tis["read_connection"]))}  # fmt: skip
    assert values == {"return_value": ["s3", "warehouse.example", 9000, {"region": "eu"}],
                      "with_connection": "warehouse.example"}  # fmt: skip


def test_the_supervisor_keeps_heartbeating_while_an_xcom_call_is_held(xcom_run, tmp_path):
    from spawnflow.models.run import TaskInstance

    storage = tmp_path / "xcoms"
    beats: set = set()

    def count_heartbeats_then_release(_summary) -> None:
        if not list(storage.glob("hanging-*")) or (storage / "released").exists():
            return  # the call is not running yet, or released already
        with orm.session_scope(write=False) as session:
            ti = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == "held")).one()
        if ti.state == "running" and ti.last_heartbeat is not None:
            beats.add(ti.last_heartbeat)
        if len(beats) >= 3:  # two heartbeats written while the helper sat in the call
            (storage / "released").write_text("")

    run_id, tis = xcom_run("held", on_loop=count_heartbeats_then_release)
    ti = tis["push_into_a_held_backend"]
    assert ti.state == "success", ti.reason
    assert len(beats) >= 3
    assert rows(run_id)[("push_into_a_held_backend", "hold")].reference


def test_the_supervisor_enforces_execution_timeout_while_a_call_hangs(xcom_run):
    import psutil

    # The helper's own timeout (60 s) is far away: the task's 3 s end it.
    _, tis = xcom_run("hanging")
    ti = tis["push_into_a_hanging_backend"]
    assert ti.state == "failed"
    assert ti.reason.startswith("execution_timeout of 3 seconds exceeded"), ti.reason
    (helper,) = helper_pids(ti)
    assert not psutil.pid_exists(helper) or psutil.Process(helper).status() == "zombie"


def test_execution_timeout_bounds_execute_alone_as_airflows_does(xcom_run, tmp_path):
    """The task's on_execute_callback and the push of its return value are each held
    past its 5 s execution_timeout; its execute is quick, so the try succeeds. (Before,
    the budget ran from the Dag file's import and covered both.)"""
    storage = tmp_path / "xcoms"
    seen: dict = {}

    def release_each_past_the_timeout(_summary) -> None:
        holds = [(tmp_path / "callback-running", tmp_path / "callback-released")]
        holds += [(mark, storage / "released") for mark in storage.glob("hanging-*")]
        for mark, release in holds:
            if mark.exists() and not release.exists():
                since = seen.setdefault(release, time.monotonic())
                if time.monotonic() - since > 6:  # held at least that long
                    release.write_text("")

    run_id, tis = xcom_run("around_execute", on_loop=release_each_past_the_timeout)
    ti = tis["returns_slowly_stored"]
    assert (ti.state, ti.reason) == ("success", None)
    assert set(seen) == {tmp_path / "callback-released", storage / "released"}
    assert rows(run_id)[("returns_slowly_stored", "return_value")].reference


@pytest.mark.parametrize(
    ("dag_id", "task_id", "overran"),
    [
        ("hanging_callback", "never_executes",
         "the task's templates, arguments and on_execute_callback outlasted "),
        ("hanging_return", "returns_into_a_hang",
         "the task's return value was not stored within "),
    ],
)  # fmt: skip
def test_what_hangs_around_execute_ends_the_try_on_callback_timeout(
    xcom_run, dag_id, task_id, overran
):
    _, tis = xcom_run(dag_id, **{"core.callback_timeout": "6"})  # the longer of it and 5 s
    ti = tis[task_id]
    assert ti.state == "failed"
    assert ti.reason.startswith(
        overran + "6 seconds (the longer of execution_timeout and [core] callback_timeout)"
    ), ti.reason
    assert "; the task process was " in ti.reason


def test_a_value_pushed_again_replaces_the_stored_object(xcom_run, tmp_path):
    run_id, tis = xcom_run("replacing")
    assert tis["push_twice"].state == "success"
    objects = list((tmp_path / "xcoms").rglob("twice-*"))
    assert len(objects) == 1  # the first one was purged once the second row was written
    assert stored_text(objects[0]) == '"second"'
    assert rows(run_id)[("push_twice", "twice")].reference.endswith(objects[0].name)


def stored_text(path: Path) -> str:
    return path.read_text()


def test_references_round_trip_on_server_databases(
    db_backend, database_url, start_method, make_settings, tmp_path
):
    if db_backend == "sqlite":
        pytest.skip("SQLite runs every other test in this module")
    run_dag = dag_runner(start_method, make_settings, tmp_path, database_url)
    run_id, tis = run_dag("passing")
    assert {t: ti.state for t, ti in tis.items()} == {"produce": "success", "consume": "success"}
    stored = rows(run_id)
    assert stored[("produce", "return_value")].value is None
    assert stored[("produce", "return_value")].reference.startswith((tmp_path / "xcoms").as_uri())
    cleared = run_service.clear("passing", _run_name(tis["produce"]), ["produce"])
    assert cleared.purge_failures == []
    assert len(list((tmp_path / "xcoms").rglob("*.json"))) == 1


def test_a_reference_too_long_for_any_database_is_refused_before_it_is_written(
    db_backend, database_url, start_method, make_settings, tmp_path
):
    """MariaDB would cut it or refuse it with its own error (1406), PostgreSQL and SQLite
    would keep it: every database gets the same refusal, and no row."""
    run_dag = dag_runner(start_method, make_settings, tmp_path, database_url)
    run_id, tis = run_dag("hostile", backend=HOSTILE)
    reason = tis["push_long_reference"].reason
    assert tis["push_long_reference"].state == "failed"
    assert f"XCOM_BACKEND_ERROR: the XCom backend {HOSTILE} could not store XCom" in reason
    assert "may be at most 4096; what it stored was deleted again" in reason
    assert ("push_long_reference", "long_reference") not in rows(run_id)
    assert list((tmp_path / "xcoms").rglob("long_reference-*")) == []
