"""When a schedule wants runs: data intervals, as Airflow users know them.

A run covers the interval ``[start, end)`` and is due once ``end`` has passed; its
logical date is ``start``. Cron expressions are evaluated in the time zone of the
Dag's start date (UTC unless it says otherwise). ``@once`` is one run at the start
date; a manual schedule has no runs of its own.
"""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

from cronsim import CronSim

from spawnflow.sdk.schedule import Schedule

UTC = dt.UTC


class Interval(NamedTuple):
    """A data interval; its run's logical date is ``start``."""

    start: dt.datetime
    end: dt.datetime


def next_interval(
    schedule: Schedule,
    start_date: dt.datetime | None,
    end_date: dt.datetime | None,
    catchup: bool,
    last_logical_date: dt.datetime | None,
    now: dt.datetime,
    zone: dt.tzinfo = UTC,
) -> Interval | None:
    """The next interval to create a run for, if one is due at ``now``.

    ``last_logical_date`` is that of the newest scheduled run so far, if any; cron
    expressions are read in ``zone``.
    """
    if schedule.kind == "manual" or start_date is None:
        return None
    start_date = start_date.astimezone(zone)
    if last_logical_date is not None:
        last_logical_date = last_logical_date.astimezone(zone)
    if schedule.kind == "once":
        if last_logical_date is None and start_date <= now:
            return Interval(start_date, start_date)
        return None
    candidate = _next_candidate(schedule, start_date, catchup, last_logical_date, now)
    if candidate.end > now:
        return None
    if end_date is not None and candidate.start > end_date:
        return None
    return _in_utc(candidate)


def upcoming(
    schedule: Schedule,
    start_date: dt.datetime | None,
    end_date: dt.datetime | None,
    catchup: bool,
    last_logical_date: dt.datetime | None,
    now: dt.datetime,
    zone: dt.tzinfo = UTC,
    count: int = 1,
) -> list[Interval]:
    """The next ``count`` intervals (or fewer, where the schedule ends) that
    :func:`next_interval` will give, each once it is due, to a scheduler that runs on
    time; the first may be due already. None for a manual or asset schedule."""
    if schedule.kind in ("manual", "assets") or start_date is None:
        return []
    start_date = start_date.astimezone(zone)
    if last_logical_date is not None:
        last_logical_date = last_logical_date.astimezone(zone)
    if schedule.kind == "once":
        return [] if last_logical_date is not None else [_in_utc(Interval(start_date, start_date))]
    found: list[Interval] = []
    candidate = _next_candidate(schedule, start_date, catchup, last_logical_date, now)
    while len(found) < count and (end_date is None or candidate.start <= end_date):
        found.append(_in_utc(candidate))
        candidate = _after(schedule, candidate.start, start_date)
    return found


def between(
    schedule: Schedule,
    start_date: dt.datetime | None,
    end_date: dt.datetime | None,
    first: dt.datetime,
    last: dt.datetime,
    zone: dt.tzinfo = UTC,
) -> list[Interval]:
    """The intervals whose logical date (their start) lies in ``[first, last]``, both
    included, within the Dag's own start and end dates: the runs a backfill of that
    range makes. None for a manual, asset or ``@once`` schedule."""
    if schedule.kind in ("manual", "assets", "once") or start_date is None:
        return []
    start_date = start_date.astimezone(zone)
    first = max(first.astimezone(zone), start_date)
    if end_date is not None:
        last = min(last, end_date)
    found: list[Interval] = []
    candidate = _first_at_or_after(schedule, start_date, first)
    while candidate.start <= last:
        found.append(_in_utc(candidate))
        candidate = _after(schedule, candidate.start, start_date)
    return found


def _first_at_or_after(schedule: Schedule, start_date: dt.datetime, moment: dt.datetime):
    """The first interval of the schedule (aligned on ``start_date``) that starts at or
    after ``moment`` (not before ``start_date``)."""
    if schedule.kind == "interval":
        delta = _delta(schedule)
        steps = max(0, -((start_date - moment) // delta))  # ceil((moment - start) / delta)
        start = start_date + steps * delta
        return Interval(start, start + delta)
    start = _tick_at_or_after(schedule, moment)
    return Interval(start, _tick_after(schedule, start))


def _next_candidate(
    schedule: Schedule,
    start_date: dt.datetime,
    catchup: bool,
    last_logical_date: dt.datetime | None,
    now: dt.datetime,
) -> Interval:
    """The interval after the last scheduled run's, due or not: without catchup, no
    older than the newest one that has ended by ``now``."""
    if last_logical_date is None or not catchup:
        candidate = _first_interval(schedule, start_date)
        if not catchup:
            latest = _latest_complete(schedule, start_date, now)
            if latest is not None and latest.start > candidate.start:
                candidate = latest
        if last_logical_date is not None and candidate.start <= last_logical_date:
            candidate = _after(schedule, last_logical_date, start_date)
        return candidate
    return _after(schedule, last_logical_date, start_date)


def _in_utc(interval: Interval) -> Interval:
    return Interval(interval.start.astimezone(UTC), interval.end.astimezone(UTC))


def _first_interval(schedule: Schedule, start_date: dt.datetime) -> Interval:
    if schedule.kind == "interval":
        return Interval(start_date, start_date + _delta(schedule))
    first = _tick_at_or_after(schedule, start_date)
    return Interval(first, _tick_after(schedule, first))


def _after(schedule: Schedule, logical_date: dt.datetime, start_date: dt.datetime) -> Interval:
    """The interval that follows the one starting at ``logical_date``."""
    if schedule.kind == "interval":
        start = logical_date + _delta(schedule)
        return Interval(start, start + _delta(schedule))
    start = _tick_after(schedule, logical_date)
    return Interval(start, _tick_after(schedule, start))


def _latest_complete(schedule: Schedule, start_date: dt.datetime, now: dt.datetime):
    """The newest interval that has ended by ``now``, or None."""
    if schedule.kind == "interval":
        delta = _delta(schedule)
        if now < start_date + delta:
            return None
        count = int((now - start_date) / delta)
        end = start_date + count * delta
        return Interval(end - delta, end)
    zone = start_date.tzinfo
    ticks = CronSim(_cron(schedule), now.astimezone(zone) + dt.timedelta(seconds=1), reverse=True)
    end = next(ticks)
    start = next(ticks)
    if start < start_date:
        return None
    return Interval(start, end)


def _tick_at_or_after(schedule: Schedule, moment: dt.datetime) -> dt.datetime:
    return next(CronSim(_cron(schedule), moment - dt.timedelta(seconds=1)))


def _tick_after(schedule: Schedule, moment: dt.datetime) -> dt.datetime:
    return next(CronSim(_cron(schedule), moment))


def _cron(schedule: Schedule) -> str:
    # Only cron schedules get here, and schedule.parse always stores their expression.
    assert schedule.cron is not None, schedule
    return schedule.cron


def _delta(schedule: Schedule) -> dt.timedelta:
    return dt.timedelta(seconds=schedule.seconds or 0)
