"""Warm-stop requests once a process is on its way out (lifecycle's own state, in this
process: the handlers are called directly, no signal is sent)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

from spawnflow.bootstrap import lifecycle


@pytest.fixture
def fresh(monkeypatch):
    """lifecycle's state as a child's is before any request; restored afterwards."""
    monkeypatch.setattr(lifecycle, "stop_requested", lifecycle.StopRequest())
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


#: A stop request handled while the main thread holds the event's lock, as it does on
#: its way into and out of every ``stop_requested.wait(0.5)`` of a target's loop.
SIGNAL_WHILE_WAITING = """
import signal
from spawnflow.bootstrap import lifecycle

event = lifecycle.StopRequest()
signal.signal(signal.SIGTERM, lambda signum, frame: event.set())
with event._changed:  # where wait() is between its lock and its condition
    signal.raise_signal(signal.SIGTERM)  # the handler runs here, on this stack
    handled = True
print(event.is_set(), event.wait(0))
"""


def test_a_signal_handler_can_set_the_stop_event_while_the_main_thread_holds_its_lock():
    """With threading.Event this hangs: set() waits on the lock its own thread holds.
    In a process of its own, so that such a hang fails this test only."""
    done = subprocess.run([sys.executable, "-c", SIGNAL_WHILE_WAITING], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def test_the_stop_event_wakes_a_waiting_thread_and_can_be_cleared():
    event = lifecycle.StopRequest()
    assert not event.is_set()
    assert event.wait(0) is False
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(event.wait(None)))
    waiter.start()
    event.set()
    waiter.join(timeout=60)
    assert woken == [True]
    event.clear()
    assert not event.is_set()


#: A stop request whose handler runs in a weakref callback, where Python cannot raise
#: (as in the callback of an import's module lock), then a second request.
SIGNAL_IN_A_CALLBACK = """
import signal, weakref
from spawnflow.bootstrap import lifecycle

lifecycle.install()


class Held:
    pass


def on_collected(_ref):
    signal.raise_signal(signal.SIGTERM)  # its handler runs here, inside the callback


held = Held()
ref = weakref.ref(held, on_collected)
del held
print("requested:", lifecycle.stop_requested.is_set(), flush=True)
try:
    lifecycle._on_stop_request(signal.SIGTERM, None)
except lifecycle.WarmStop:
    print("a second request unwinds", flush=True)
"""


def test_a_stop_request_handled_where_python_cannot_raise_stands_and_prints_nothing():
    done = subprocess.run([sys.executable, "-c", SIGNAL_IN_A_CALLBACK], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["requested: True", "a second request unwinds"]
    assert done.stderr == ""  # no "Exception ignored in ... WarmStop" traceback
