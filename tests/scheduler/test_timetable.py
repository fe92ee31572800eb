"""When runs are due: data intervals for every kind of schedule."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from spawnflow.processors.scheduler.timetable import Interval, next_interval
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
