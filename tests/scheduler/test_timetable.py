"""When runs are due: data intervals for every kind of schedule."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from spawnflow.processors.scheduler.timetable import Interval, next_interval, upcoming
from spawnflow.sdk.schedule import parse

UTC = dt.UTC
START = dt.datetime(2026, 1, 1, tzinfo=UTC)
NOW = dt.datetime(2026, 11, 30, 2, 30, tzinfo=UTC)  # a Monday


def at(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "catchup", "last", "expected"),
    [
        ("@daily", False, None, Interval(at(2026, 11, 29), at(2026, 11, 30))),
        ("@daily", True, None, Interval(at(2026, 1, 1), at(2026, 1, 2))),
        ("@daily", True, at(2026, 1, 1), Interval(at(2026, 1, 2), at(2026, 1, 3))),
        ("@daily", False, at(2026, 11, 29), None),  # the latest interval has its run
        ("0 6 * * 1-5", False, None, Interval(at(2026, 11, 26, 6), at(2026, 11, 27, 6))),
        ("@hourly", False, None, Interval(at(2026, 11, 30, 1), at(2026, 11, 30, 2))),
        (dt.timedelta(hours=6), False, None, Interval(at(2026, 11, 29, 18), at(2026, 11, 30))),
        (dt.timedelta(hours=6), True, START, Interval(at(2026, 1, 1, 6), at(2026, 1, 1, 12))),
        ("@once", False, None, Interval(START, START)),
        ("@once", False, START, None),
        (None, False, None, None),
    ],
)  # fmt: skip
def test_next_interval(schedule, catchup, last, expected):
    assert next_interval(parse(schedule), START, None, catchup, last, NOW) == expected


def test_nothing_is_due_before_the_first_interval_ends():
    start = at(2026, 11, 30)
    assert next_interval(parse("@daily"), start, None, True, None, NOW) is None


def test_no_run_starts_after_the_end_date():
    end = at(2026, 1, 2)
    assert next_interval(parse("@daily"), START, end, True, at(2026, 1, 2), NOW) is None
    assert next_interval(parse("@daily"), START, end, True, at(2026, 1, 1), NOW) == Interval(
        at(2026, 1, 2), at(2026, 1, 3)
    )


def test_cron_follows_the_start_dates_zone_through_daylight_saving():
    paris = ZoneInfo("Europe/Paris")
    start = dt.datetime(2026, 1, 1, tzinfo=paris)
    winter = next_interval(parse("0 6 * * *"), start, None, False, None, at(2026, 1, 15, 12), paris)
    summer = next_interval(parse("0 6 * * *"), start, None, False, None, at(2026, 7, 15, 12), paris)
    assert winter.start == at(2026, 1, 14, 5)  # 06:00 CET
    assert summer.start == at(2026, 7, 14, 4)  # 06:00 CEST


@pytest.mark.parametrize(
    ("schedule", "catchup", "last", "starts"),
    [
        # Without catchup the newest ended interval comes first: due now, made at once.
        ("@daily", False, None, [at(2026, 11, 29), at(2026, 11, 30), at(2026, 12, 1)]),
        ("@daily", False, at(2026, 11, 29), [at(2026, 11, 30), at(2026, 12, 1), at(2026, 12, 2)]),
        ("@daily", True, at(2026, 1, 1), [at(2026, 1, 2), at(2026, 1, 3), at(2026, 1, 4)]),
        (dt.timedelta(hours=6), True, START, [at(2026, 1, 1, 6), at(2026, 1, 1, 12),
                                              at(2026, 1, 1, 18)]),
        ("@once", False, None, [START]),
        ("@once", False, START, []),
        (None, False, None, []),
    ],
)  # fmt: skip
def test_upcoming_intervals_are_what_next_interval_gives_as_each_falls_due(
    schedule, catchup, last, starts
):
    found = upcoming(parse(schedule), START, None, catchup, last, NOW, count=3)
    assert [interval.start for interval in found] == starts
    # Each one is what the scheduler creates once it is due, after the one before it.
    for interval in found:
        assert next_interval(parse(schedule), START, None, catchup, last, interval.end) == interval
        last = interval.start


def test_upcoming_intervals_stop_at_the_end_date():
    found = upcoming(parse("@daily"), START, at(2026, 1, 3), True, at(2026, 1, 1), NOW, count=5)
    assert [interval.start for interval in found] == [at(2026, 1, 2), at(2026, 1, 3)]
