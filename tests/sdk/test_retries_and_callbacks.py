"""Retry waits (exponential backoff with jitter, as Airflow computes it) and the callback
arguments of tasks and Dags, as the SDK builds and serializes them (no process)."""

from __future__ import annotations

import datetime as dt

import msgspec
import pytest

from spawnflow import CommandTask, Dag, task
from spawnflow.comms import retries
from spawnflow.comms.tasks import Workload
from spawnflow.sdk import building, callbacks, serialize
from spawnflow.sdk.tasks import DagDefinitionError


def no_jitter(key: str, span: int) -> int:
    return 0


def most_jitter(key: str, span: int) -> int:
    return span - 1


# -- the wait -----------------------------------------------------------------------------


def test_without_backoff_every_try_waits_the_retry_delay():
    assert [retries.retry_wait(7.5, n) for n in (1, 2, 5)] == [7.5, 7.5, 7.5]


def test_backoff_doubles_the_base_with_each_try():
    waits = [
        retries.retry_wait(10, n, exponential_backoff=True, jitter=no_jitter) for n in (1, 2, 3, 4)
    ]
    assert waits == [10, 20, 40, 80]


def test_the_jitter_adds_less_than_one_base():
    waits = [
        retries.retry_wait(10, n, exponential_backoff=True, jitter=most_jitter) for n in (1, 2, 3)
    ]
    assert waits == [19, 39, 79]


def test_max_retry_delay_caps_the_wait_jitter_included():
    capped = retries.retry_wait(
        10, 4, exponential_backoff=True, max_retry_delay=45, jitter=most_jitter
    )
    assert capped == 45


def test_a_delay_under_a_second_or_of_zero_backs_off_from_one_second_as_airflows_does():
    assert retries.retry_wait(0, 1, exponential_backoff=True, jitter=no_jitter) == 1
    assert retries.retry_wait(0.2, 1, exponential_backoff=True, jitter=no_jitter) == 1
    assert retries.retry_wait(0.2, 4, exponential_backoff=True, jitter=no_jitter) == 2  # ceil(1.6)


def test_many_tries_stop_at_a_day_without_overflowing():
    assert retries.retry_wait(1, 2000, exponential_backoff=True) == retries.MAX_RETRY_DELAY


def test_the_default_jitter_is_the_same_for_one_try_wherever_it_is_computed():
    key = retries.try_key("etl", "load", 42, 2)
    first = retries.retry_wait(30, 2, exponential_backoff=True, key=key)
    assert first == retries.retry_wait(30, 2, exponential_backoff=True, key=key)
    assert 60 <= first < 120
    # Other tries of other task instances spread over the window.
    spread = {
        retries.retry_wait(30, 2, exponential_backoff=True, key=retries.try_key("etl", "x", n, 2))
        for n in range(50)
    }
    assert len(spread) > 10
    assert all(60 <= wait < 120 for wait in spread)


def test_a_workload_waits_what_its_task_asks_and_knows_whether_a_retry_follows():
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    workload = Workload(
        ti_id=3, dag_id="d", run_id="r", task_id="t", try_number=2, dag_file="f.py",
        dags_folder=None, logical_date=now, data_interval_start=now, data_interval_end=now,
        conf={}, params={}, execution_timeout=None, retry_delay=5.0, log_file="x.log",
        retry_exponential_backoff=True, max_retry_delay=8.0, max_tries=2,
    )  # fmt: skip
    assert workload.retry_wait() == 8.0  # base 10, capped
    assert workload.retried_if_failed()
    last = msgspec.structs.replace(workload, try_number=3)
    assert not last.retried_if_failed()
    unknown = msgspec.structs.replace(workload, max_tries=None)
    assert not unknown.retried_if_failed()  # tasks test: the only try is the last


# -- the arguments ------------------------------------------------------------------------


def on_anything(context):
    pass


def also(context):
    pass


@pytest.fixture(autouse=True)
def _fresh():
    building.forget_built_dags()


def test_retry_arguments_and_callbacks_come_from_default_args_and_task_arguments_win():
    with Dag(
        "d",
        default_args={
            "retry_exponential_backoff": True,
            "max_retry_delay": dt.timedelta(minutes=10),
            "on_failure_callback": on_anything,
            "on_retry_callback": [on_anything, also],
        },
    ) as dag:

        @task(max_retry_delay=30, on_success_callback=also)
        def a():
            pass

        a()
        CommandTask("b", "true", retry_exponential_backoff=False, on_execute_callback=also)
    a_task, b_task = dag.task_dict["a"], dag.task_dict["b"]
    assert (a_task.retry_exponential_backoff, a_task.max_retry_delay) == (
        True,
        dt.timedelta(seconds=30),
    )
    assert (b_task.retry_exponential_backoff, b_task.max_retry_delay) == (
        False,
        dt.timedelta(minutes=10),
    )
    assert a_task.callbacks == {
        "on_success_callback": [also],
        "on_retry_callback": [on_anything, also],
        "on_failure_callback": [on_anything],
    }
    assert sorted(b_task.callbacks) == [
        "on_execute_callback", "on_failure_callback", "on_retry_callback"
    ]  # fmt: skip


def test_the_serialized_dag_says_which_callbacks_exist_and_carries_the_backoff():
    with Dag("d", on_failure_callback=on_anything, default_args={"on_retry_callback": also}) as dag:

        @task(retry_exponential_backoff=True, max_retry_delay=dt.timedelta(minutes=2))
        def a():
            pass

        a()
    document = serialize.DagDocument(
        version=serialize.VERSION, dag=serialize.serialize(dag), file_hash="x"
    )
    again = serialize.decode(serialize.encode(document)).dag
    assert again.callbacks == ["on_failure_callback"]
    assert again.task("a").callbacks == ["on_retry_callback"]
    assert (again.task("a").retry_exponential_backoff, again.task("a").max_retry_delay) == (
        True,
        120.0,
    )
    assert again.default_args == {"on_retry_callback": True}  # a flag, not the function


def test_a_document_written_before_these_fields_still_reads_with_their_defaults():
    with Dag("d") as dag:

        @task
        def a():
            pass

        a()
    raw = msgspec.json.decode(
        serialize.encode(
            serialize.DagDocument(
                version=serialize.VERSION, dag=serialize.serialize(dag), file_hash="x"
            )
        )
    )
    del raw["dag"]["callbacks"]
    for name in ("callbacks", "retry_exponential_backoff", "max_retry_delay"):
        del raw["dag"]["tasks"][0][name]
    old = serialize.decode(msgspec.json.encode(raw)).dag
    assert old.callbacks == []
    assert (old.task("a").callbacks, old.task("a").retry_exponential_backoff) == ([], False)
    assert old.task("a").max_retry_delay is None


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"on_success_callback": "notify"}, "on_success_callback 'notify' must be a callable"),
        ({"on_retry_callback": [on_anything, 3]}, "on_retry_callback 3 must be a callable"),
        ({"retry_exponential_backoff": "yes"}, "retry_exponential_backoff 'yes' must be True"),
        ({"max_retry_delay": -1}, "max_retry_delay -1 must be a non-negative timedelta"),
    ],
)
def test_bad_retry_and_callback_arguments_name_the_task(arguments, problem):
    def a():
        pass

    with Dag("d"), pytest.raises(DagDefinitionError, match="task 'a'") as raised:
        task(**arguments)(a)()
    assert problem in str(raised.value)


def test_a_bad_dag_callback_names_the_dag():
    with pytest.raises(DagDefinitionError, match=r"Dag 'd'.*on_failure_callback 1 must be"):
        Dag("d", on_failure_callback=1)


def test_each_callback_is_called_and_one_that_raises_does_not_stop_the_next():
    called, reported = [], []

    def boom(context):
        raise RuntimeError("no luck")

    failed = callbacks.call_each(
        [boom, lambda context: called.append(context["x"])],
        {"x": 1},
        lambda function, text: reported.append((function, text)),
    )
    assert (failed, called) == (1, [1])
    assert reported[0][0] is boom
    assert "RuntimeError: no luck" in reported[0][1]
