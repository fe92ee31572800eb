"""Warm-stop requests once a process is on its way out (lifecycle's own state, in this
process: the handlers are called directly, no signal is sent)."""

from __future__ import annotations

import signal
import threading

import pytest

from spawnflow.bootstrap import lifecycle


@pytest.fixture
def fresh(monkeypatch):
    """lifecycle's state as a child's is before any request; restored afterwards."""
    monkeypatch.setattr(lifecycle, "stop_requested", threading.Event())
    for name, value in (("_deferred", False), ("_unwinding", False), ("_now", False),
                        ("_stop_signal", None)):  # fmt: skip
        monkeypatch.setattr(lifecycle, name, value)
    return lifecycle


def test_a_request_unwinds_a_process_that_is_still_running(fresh):
    with pytest.raises(lifecycle.WarmStop):
        fresh._on_stop_request(signal.SIGTERM, None)


def test_once_its_target_ended_a_request_only_makes_the_stop_cold(fresh):
    fresh.defer_warm_stop()
    fresh._on_stop_request(signal.SIGTERM, None)  # deferred: the target returns
    fresh.exiting()
    with fresh.unwinding():  # the launcher stops the children
        pass
    fresh._on_stop_request(signal.SIGTERM, None)  # in an atexit handler, say: no raise
    assert fresh.now_requested()


def test_stopping_children_while_unwinding_leaves_it_unwinding(fresh):
    with pytest.raises(lifecycle.WarmStop):
        fresh._on_stop_request(signal.SIGTERM, None)
    with fresh.unwinding():
        pass
    fresh._on_stop_request(signal.SIGTERM, None)  # a second request: cold, no raise
    assert fresh.now_requested()
