"""The XCom helper process, driven through the client the supervisor and commands use.

Every test runs under each start method. The backends are real ones named by import
string (``tests.fixtures.xcom_backends``), loaded by the helper child itself.
"""

from __future__ import annotations

import json

import psutil
import pytest

from spawnflow import xcoms
from spawnflow.bootstrap import wire
from spawnflow.comms.states import ErrorKind
from spawnflow.comms.tasks import Done, GetVariable, VariableValue
from spawnflow.comms.xcoms import LoadXCom, PurgeXCom, StoreXCom, XComLoaded, XComStored
from spawnflow.sdk import XComRef
from spawnflow.xcoms.calls import XComHelper
from tests.oskit import KILLED

BACKEND_ERROR, BACKEND_TIMEOUT = ErrorKind.XCOM_BACKEND_ERROR, ErrorKind.XCOM_BACKEND_TIMEOUT

MISBEHAVING = "tests.fixtures.xcom_backends:MisbehavingBackend"


def ref(key: str, size: int = 0) -> XComRef:
    return XComRef("dag", "run_1", "task", key, size)


def store(key: str, value: str = '"a value"'):
    return lambda id: StoreXCom(id=id, ref=ref(key, len(value)), value=value)


@pytest.fixture
def helper_settings(make_settings, tmp_path, start_method):
    def make(backend: str = "objectstorage", **values):
        return make_settings(**{
            "core.mp_start_method": start_method, "core.xcom_backend": backend,
            "xcom.objectstorage_path": (tmp_path / "xcoms").as_uri(), **values,
        })  # fmt: skip

    return make


@pytest.fixture
def helpers():
    started: list[XComHelper] = []

    def make(settings, **options) -> XComHelper:
        helper = XComHelper(settings, **options)
        started.append(helper)
        return helper

    yield make
    for helper in started:
        helper.stop(grace=0)


def serve_until(helper: XComHelper, done, seconds: float = 120) -> None:
    """Drive the helper's watch, as a supervisor's loop does, until ``done()``."""
    assert helper.watch.until(done, timeout=seconds, poll=0.05), "no answer in time"


def test_a_value_round_trips_through_the_helper_and_purge_removes_it(
    helper_settings, helpers, tmp_path
):
    helper = helpers(helper_settings(**{"xcom.objectstorage_compression": "gzip"}))
    stored = helper.call(store("k", '{"n": 1}'))
    assert isinstance(stored, XComStored)
    assert stored.reference.endswith(".json.gz")
    loaded = helper.call(lambda id: LoadXCom(id=id, ref=ref("k"), reference=stored.reference))
    assert loaded == XComLoaded(id=loaded.id, value='{"n": 1}')
    purged = helper.call(lambda id: PurgeXCom(id=id, ref=ref("k"), reference=stored.reference))
    assert isinstance(purged, Done)
    assert not list((tmp_path / "xcoms").rglob("*.gz"))
    assert helper.started == 1


def test_overlapping_calls_are_each_answered_with_their_own_result(helper_settings, helpers):
    helper = helpers(helper_settings(backend=MISBEHAVING))
    answers: dict[str, wire.Response] = {}
    for key in ("slow_first", "second", "slow_third"):
        helper.submit(store(key, f'"{key}"'), lambda answer, key=key: answers.update({key: answer}))
    assert helper.pending() == 3  # all three wait at once; one is in flight
    serve_until(helper, lambda: len(answers) == 3)
    for key, answer in answers.items():
        assert isinstance(answer, XComStored)
        assert f"/{key}-" in answer.reference
    assert len({answer.id for answer in answers.values()}) == 3


def test_a_helper_killed_mid_call_fails_every_waiting_call_and_the_next_call_gets_a_new_one(
    helper_settings, helpers, tmp_path
):
    helper = helpers(helper_settings(backend=MISBEHAVING))
    answers: list[wire.Response] = []
    helper.submit(store("hang"), answers.append)
    helper.submit(store("queued"), answers.append)
    first_pid = helper.child.pid
    # Wait until the hanging call runs in the backend, then kill its process.
    serve_until(helper, lambda: any((tmp_path / "xcoms").glob(f"hanging-{first_pid}")))
    assert helper.pending() == 2
    psutil.Process(first_pid).kill()
    serve_until(helper, lambda: len(answers) == 2)
    assert [a.kind for a in answers] == [BACKEND_ERROR, BACKEND_ERROR]
    assert f"the XCom helper (pid {first_pid}) ended ({KILLED})" in answers[0].message

    after = helper.call(store("after"))
    assert isinstance(after, XComStored)
    assert helper.started == 2
    assert helper.child.pid != first_pid


def test_a_call_past_helper_call_timeout_kills_the_helper_and_the_next_call_starts_fresh(
    helper_settings, helpers
):
    helper = helpers(helper_settings(backend=MISBEHAVING, **{"xcom.helper_call_timeout": "1"}))
    helper.call(store("warm_up"))  # boot time is not the call's time
    first_pid = helper.child.pid
    answer = helper.call(store("hang"))
    assert answer.kind == BACKEND_TIMEOUT
    assert "[xcom] helper_call_timeout (1 s)" in answer.message
    assert helper.child is None
    gone = psutil.wait_procs([psutil.Process(first_pid)], timeout=60)[0] if psutil.pid_exists(
        first_pid) else [first_pid]  # fmt: skip
    assert gone or psutil.Process(first_pid).status() == psutil.STATUS_ZOMBIE
    after = helper.call(store("after"))
    assert isinstance(after, XComStored)
    assert helper.started == 2


def test_a_value_the_backend_refuses_fails_that_call_only(helper_settings, helpers):
    helper = helpers(helper_settings(backend=MISBEHAVING))
    refused = helper.call(store("refuse"))
    assert refused.kind == BACKEND_ERROR
    assert "could not store XCom 'refuse' of task 'task'" in refused.message
    assert "refuses the key 'refuse' on purpose" in refused.message
    assert isinstance(helper.call(store("fine")), XComStored)
    assert helper.started == 1


def test_the_helper_reads_variables_through_its_parent(helper_settings, helpers, tmp_path):
    asked: list[str] = []

    def answer(request: wire.Request) -> wire.Response:
        assert isinstance(request, GetVariable)
        asked.append(request.key)
        return VariableValue(id=request.id, value="from_the_supervisor")

    helper = helpers(helper_settings(backend=MISBEHAVING), answer_request=answer)
    stored = helper.call(store("with_variable"))
    assert asked == ["xcom_folder"]
    assert "/from_the_supervisor/" in stored.reference


def test_a_backend_that_cannot_load_fails_the_call_and_the_start_up_check(
    helper_settings, helpers, start_method
):
    settings = helper_settings(backend="tests.fixtures.xcom_backends:NotABackend")
    with pytest.raises(xcoms.BackendError, match=r"is not a subclass of spawnflow\.sdk"):
        xcoms.check(settings, method=start_method)
    answer = helpers(settings).call(store("k"))
    assert answer.kind == BACKEND_ERROR
    assert "is not a subclass" in answer.message


def test_the_start_up_check_reports_the_routing_the_class_asks_for(helper_settings, start_method):
    assert xcoms.check(helper_settings(), method=start_method) == xcoms.BackendChoice(
        "objectstorage", in_helper=True
    )
    in_worker = helper_settings(backend="tests.fixtures.xcom_backends:RunsInWorker")
    assert xcoms.check(in_worker, method=start_method).in_helper is False
    assert xcoms.check(helper_settings(backend="database")) == xcoms.DATABASE


@pytest.fixture(scope="module")
def s3_endpoint():
    """A real S3 API on loopback: moto in server mode, in a thread of this process."""
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_values_round_trip_through_s3_on_loopback(helper_settings, helpers, s3_endpoint):
    import boto3

    bucket = "spawnflow-xcoms"
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    client.create_bucket(Bucket=bucket)
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing",
               "client_kwargs": {"region_name": "us-east-1"}}  # fmt: skip
    helper = helpers(helper_settings(**{
        "xcom.objectstorage_path": f"s3://{bucket}/xcoms",
        "xcom.objectstorage_options": json.dumps(options),
        "xcom.objectstorage_compression": "gzip",
    }))  # fmt: skip
    stored = helper.call(store("k", '{"big": "' + "y" * 10_000 + '"}'))
    assert stored.reference.startswith(f"s3://{bucket}/xcoms/dag/run_1/task/k-")
    key = stored.reference.removeprefix(f"s3://{bucket}/")
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read()[:2] == b"\x1f\x8b"
    loaded = helper.call(lambda id: LoadXCom(id=id, ref=ref("k"), reference=stored.reference))
    assert loaded.value == '{"big": "' + "y" * 10_000 + '"}'
    helper.call(lambda id: PurgeXCom(id=id, ref=ref("k"), reference=stored.reference))
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def test_the_helper_reads_connections_through_its_parent(helper_settings, helpers):
    from spawnflow.comms.tasks import ConnectionValue, GetConnection
    from spawnflow.sdk import Connection

    def answer(request: wire.Request) -> wire.Response:
        assert isinstance(request, GetConnection)
        found = Connection(conn_id=request.conn_id, conn_type="fs", schema="folder_from_conn")
        return ConnectionValue(id=request.id, connection=found)

    helper = helpers(helper_settings(backend=MISBEHAVING), answer_request=answer)
    assert "/folder_from_conn/" in helper.call(store("with_connection")).reference


def test_a_backend_answer_of_the_wrong_type_fails_the_call_not_the_caller(helper_settings, helpers):
    helper = helpers(helper_settings(backend="tests.fixtures.xcom_backends:ReturnsBytes"))
    stored = helper.call(store("k"))
    loaded = helper.call(lambda id: LoadXCom(id=id, ref=ref("k"), reference=stored.reference))
    assert loaded.kind == BACKEND_ERROR
    assert "deserialize() returned a bytes, not a str" in loaded.message
    assert isinstance(helper.call(store("after")), XComStored)
    assert helper.started == 1


HOSTILE = "tests.fixtures.xcom_backends:Hostile"


@pytest.mark.parametrize(
    ("key", "kind", "cause"),
    [
        ("wrong_type", BACKEND_ERROR, "load() returned a str, not bytes"),
        ("wrong_value", BACKEND_ERROR, "but the value pushed was 9: it is not what was stored"),
        ("bad_deserialize", BACKEND_ERROR, "ValueError: the key to decrypt it is gone"),
        ("undecodable", BACKEND_ERROR, "is not the JSON text pushed"),
        ("huge", ErrorKind.XCOM_TOO_LARGE, "is 2097154 bytes; [core] max_xcom_size is 1048576"),
    ],
)  # fmt: skip
def test_what_a_backend_gives_back_is_checked_and_fails_that_call_only(
    helper_settings, helpers, key, kind, cause
):
    helper = helpers(helper_settings(backend=HOSTILE))
    stored = helper.call(store(key))
    assert isinstance(stored, XComStored)
    loaded = helper.call(
        lambda id: LoadXCom(id=id, ref=ref(key, len('"a value"')), reference=stored.reference)
    )
    assert loaded.kind == kind
    assert loaded.message.startswith(
        f"the XCom backend {HOSTILE} could not load XCom {key!r} of task 'task'"
    )
    assert cause in loaded.message
    assert isinstance(helper.call(store("after")), XComStored)  # the helper still serves
    assert helper.started == 1


def test_a_reference_too_long_for_the_database_is_refused_and_its_object_deleted(
    helper_settings, helpers, tmp_path
):
    helper = helpers(helper_settings(backend=HOSTILE))
    refused = helper.call(store("long_reference"))
    assert refused.kind == BACKEND_ERROR
    assert "store() returned a reference of" in refused.message
    assert "may be at most 4096; what it stored was deleted again" in refused.message
    assert list((tmp_path / "xcoms").rglob("long_reference-*")) == []
