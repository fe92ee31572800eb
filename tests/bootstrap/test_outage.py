"""ride_out: what it does between attempts, on a clock the test turns."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import exc

from spawnflow.bootstrap import outage


class Clock:
    """Stands in for the ``time`` module inside ``outage``: sleeping moves it on."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def refused() -> exc.OperationalError:
    return exc.OperationalError("SELECT 1", {}, Exception("connection refused"))


def test_a_long_backoff_still_runs_meanwhile_every_half_second(monkeypatch, make_settings):
    make_settings()
    clock = Clock()
    monkeypatch.setattr(outage, "time", clock)
    monkeypatch.setattr(outage, "_recovered_at", None)  # ride_out sets it: not for later tests
    failures = iter(range(5))  # waits of 0.25, 0.5, 1, 2 and 4 s before the sixth attempt
    called_at: list[float] = []

    def unit() -> str:
        if next(failures, None) is not None:
            raise refused()
        return "done"

    assert outage.ride_out(unit, what="testing", tolerance=60,
                           meanwhile=lambda: called_at.append(clock.now)) == "done"  # fmt: skip
    assert clock.now == pytest.approx(7.75)
    gaps = [later - earlier for earlier, later in itertools.pairwise(called_at)]
    assert max(gaps) <= outage.MEANWHILE_EVERY
    assert len(called_at) >= 7.75 / outage.MEANWHILE_EVERY


def test_attempts_follow_a_backoff_that_doubles(monkeypatch, make_settings):
    make_settings()
    clock = Clock()
    monkeypatch.setattr(outage, "time", clock)
    monkeypatch.setattr(outage, "_recovered_at", None)  # ride_out sets it: not for later tests
    attempts = []

    def unit() -> None:
        attempts.append(clock.now)
        if len(attempts) < 3:
            raise refused()

    outage.ride_out(unit, what="testing", tolerance=60)
    assert attempts == [0.0, 0.25, 0.75]


def test_a_stop_during_the_backoff_gives_up_without_another_attempt(monkeypatch, make_settings):
    make_settings()
    clock = Clock()
    monkeypatch.setattr(outage, "time", clock)
    monkeypatch.setattr(outage, "_recovered_at", None)
    attempts = []

    def unit() -> None:
        attempts.append(clock.now)
        raise refused()

    def stop_at_two_seconds() -> bool:
        return clock.now >= 2.0

    with pytest.raises(outage.GaveUp, match="stopped waiting for it after 2 s"):
        outage.ride_out(unit, what="testing", tolerance=60, give_up=stop_at_two_seconds,
                        meanwhile=lambda: None)  # fmt: skip
    # Attempts at 0, 0.25, 0.75 and 1.75 s; the stop comes half a second into the 2 s
    # pause after the fourth, and no fifth attempt follows.
    assert attempts == [0.0, 0.25, 0.75, 1.75]
    assert clock.now == pytest.approx(2.25)
