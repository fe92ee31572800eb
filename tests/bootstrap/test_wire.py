"""The wire protocol over a real pipe, in one process."""

from __future__ import annotations

import multiprocessing

import pytest

from spawnflow.bootstrap import wire
from tests.fixtures.messages import Echo, Echoed


@pytest.fixture
def channels():
    left, right = multiprocessing.get_context("spawn").Pipe(duplex=True)
    yield wire.Channel(left), wire.Channel(right)
    left.close()
    right.close()


def test_messages_round_trip_by_type(channels):
    parent, child = channels
    sent = [
        wire.Ready(pid=1, role="r", method="spawn", boot_seconds=0.5),
        Echo(id=parent.next_id(), payload={"nested": [1, "two", None]}),
        wire.ErrorResponse(id=7, kind="XCOM_BACKEND_ERROR", message="gone"),
    ]
    for message in sent:
        parent.send(message)
    assert [child.recv(timeout=5) for _ in sent] == sent


def test_request_ids_are_unique_per_channel(channels):
    parent, _ = channels
    ids = [parent.next_id() for _ in range(100)]
    assert len(set(ids)) == 100


def test_unknown_bytes_are_a_protocol_error(channels):
    parent, child = channels
    parent.connection.send_bytes(b"\x81\xa4type\xa5Bogus")
    with pytest.raises(wire.ProtocolError, match="undecodable message"):
        child.recv(timeout=5)


def test_recv_times_out_when_nothing_arrives(channels):
    _, child = channels
    with pytest.raises(TimeoutError):
        child.recv(timeout=0.01)


def test_a_response_is_typed_by_its_class():
    data = wire.encode(Echoed(id=3, payload="x"))
    assert wire.decode(data) == Echoed(id=3, payload="x")


def test_call_matches_the_answer_by_id_and_keeps_what_came_first(channels):
    parent, child = channels
    first, second = Echo(id=parent.next_id(), payload=1), Echo(id=parent.next_id(), payload=2)
    parent.send(first)
    child.recv(timeout=5)
    # The answer to the first request arrives while the caller waits for the second.
    child.send(Echoed(id=first.id, payload="early"))
    child.send(Echoed(id=second.id, payload="late"))

    assert parent.call(second, timeout=5) == Echoed(id=second.id, payload="late")
    assert child.recv(timeout=5) == second
    assert parent.poll()
    assert parent.recv(timeout=5) == Echoed(id=first.id, payload="early")


def test_calls_from_several_threads_each_get_their_own_answer(channels):
    """Answers come back in reverse order, with an unrequested message between them."""
    import threading

    caller, peer = channels
    results: dict[int, object] = {}
    threads = [
        threading.Thread(target=lambda n=n: results.update(
            {n: caller.call(Echo(id=caller.next_id(), payload=n), timeout=30)}))
        for n in range(3)
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    requests = [peer.recv(timeout=30) for _ in threads]
    peer.send(wire.Ready(pid=1, role="r", method="spawn", boot_seconds=0.1))
    for request in reversed(requests):
        peer.send(Echoed(id=request.id, payload=request.payload))
    for thread in threads:
        thread.join(timeout=30)
    assert {n: answer.payload for n, answer in results.items()} == {0: 0, 1: 1, 2: 2}
    assert all(answer.id != 0 for answer in results.values())
    assert isinstance(caller.recv(timeout=5), wire.Ready)  # kept for recv(), not lost


def test_a_call_that_times_out_leaves_no_answer_behind(channels):
    caller, peer = channels
    with pytest.raises(TimeoutError):
        caller.call(Echo(id=caller.next_id(), payload="late"), timeout=0.2)
    request = peer.recv(timeout=5)
    peer.send(Echoed(id=request.id, payload="late"))
    assert caller.recv(timeout=5) == Echoed(id=request.id, payload="late")
