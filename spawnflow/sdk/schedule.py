"""Dag schedules: a cron expression, a preset, a timedelta, ``@once``, Assets or None.

A :class:`Schedule` is plain data, so it serialises with the Dag and the
scheduler can compute run times from it without importing the Dag file. Cron
expressions are evaluated by cronsim (small and quick to import: a file parser
child pays for every import) in the Dag's time zone, UTC unless a start date says
otherwise. A Dag scheduled on Assets (``schedule=Asset("s3://...")``, ``a & b``,
``a | b`` or a list meaning all of them) runs when they are updated; its
Schedule keeps the condition as an :class:`~spawnflow.sdk.assets.AssetCondition`.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

import msgspec

from spawnflow.sdk.assets import Asset, AssetAll, AssetAny, AssetCondition, condition_of
from spawnflow.sdk.partitions import (
    Custom,
    CustomMapper,
    Identity,
    Mapper,
    PartitionMapper,
    recorded,
)


def with_partitions(
    schedule: Schedule, mappers: dict[object, object]
) -> tuple[Schedule, dict[str, CustomMapper]]:
    """``schedule`` made partition-driven: ``mappers`` maps input Assets (or URIs) to
    partition mappers; inputs without one get :class:`Identity`. Also returns the
    :class:`CustomMapper` objects among them, by URI (the schedule keeps their names)."""
    if schedule.kind != "assets" or schedule.assets is None:
        raise ValueError("partition_mappers needs a schedule on Assets")
    inputs = schedule.assets.uris()
    chosen: dict[str, Mapper] = {uri: Identity() for uri in inputs}
    custom: dict[str, CustomMapper] = {}
    for key, mapper in mappers.items():
        uri = key.uri if isinstance(key, Asset) else key
        if uri not in chosen:
            raise ValueError(f"partition_mappers names {uri!r}, which the schedule does not use")
        if isinstance(mapper, CustomMapper):
            custom[uri] = mapper
            chosen[uri] = recorded(mapper)
        elif isinstance(mapper, PartitionMapper) and not isinstance(mapper, Custom):
            chosen[uri] = mapper  # type: ignore[assignment]  # one of the Mapper union
        else:
            raise ValueError(
                f"the partition mapper of {uri!r} must be Identity(), HourToDay(), DayToWeek(), "
                f"DayToMonth() or an instance of a CustomMapper subclass, not {mapper!r}"
            )
    return msgspec.structs.replace(schedule, partition_mappers=chosen), custom


PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

UTC = dt.UTC


class Schedule(msgspec.Struct, frozen=True):
    """When a Dag runs: ``kind`` is ``cron``, ``interval``, ``once``, ``assets`` or ``manual``."""

    kind: Literal["cron", "interval", "once", "manual", "assets"]
    #: The cron expression (a preset is stored expanded, with its name in ``preset``).
    cron: str | None = None
    preset: str | None = None
    #: The interval, in seconds, of a timedelta schedule.
    seconds: float | None = None
    #: The condition on Assets of an ``assets`` schedule.
    assets: AssetCondition | None = None
    #: For a partition-driven Dag: each input asset's mapper, by URI.
    partition_mappers: dict[str, Mapper] | None = None

    def describe(self) -> str:
        if self.kind == "assets":
            text = "assets: " + (self.assets.describe() if self.assets else "")
            return text + (" (partitioned)" if self.partition_mappers else "")
        if self.kind == "cron":
            return self.preset or self.cron or ""
        if self.kind == "interval":
            return str(dt.timedelta(seconds=self.seconds or 0))
        return "@once" if self.kind == "once" else "None (manual)"


def parse(value: object) -> Schedule:
    """The Schedule for a Dag's ``schedule`` argument; ValueError saying what is allowed."""
    if value is None:
        return Schedule("manual")
    if isinstance(value, Asset | AssetAll | AssetAny) or (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(item, Asset | AssetAll | AssetAny) for item in value)
    ):
        return Schedule("assets", assets=condition_of(value))
    if isinstance(value, dt.timedelta):
        if value <= dt.timedelta(0):
            raise ValueError(f"schedule {value!r} must be a positive timedelta")
        return Schedule("interval", seconds=value.total_seconds())
    if isinstance(value, str):
        text = value.strip()
        if text == "@once":
            return Schedule("once")
        if text.startswith("@"):
            if text not in PRESETS:
                import difflib  # only for the error: a Dag file's import stays light

                known = ["@once", *PRESETS]
                close = difflib.get_close_matches(text, known, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ValueError(
                    f"schedule {value!r} is not a preset; {hint}presets: " + ", ".join(known)
                )
            return Schedule("cron", cron=PRESETS[text], preset=text)
        check_cron(text)
        return Schedule("cron", cron=" ".join(text.split()))
    raise ValueError(
        f"schedule {value!r} must be a cron expression, a preset such as '@daily', "
        "a timedelta, '@once', None, an Asset, Assets combined with & or |, "
        "or a non-empty list of Assets"
    )


def check_cron(expression: str) -> None:
    """ValueError naming what is wrong with ``expression``."""
    from cronsim import CronSim, CronSimError

    if len(expression.split()) != 5:
        raise ValueError(f"schedule {expression!r} is not a cron expression of five fields")
    try:
        CronSim(expression, dt.datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as error:
        raise ValueError(
            f"schedule {expression!r} is not a valid cron expression: {error}"
        ) from None


def zone_name(zone: dt.tzinfo | None) -> str:
    """A name that :func:`zone_from_name` turns back into the same time zone."""
    if zone is None or zone is UTC:
        return "UTC"
    key = getattr(zone, "key", None) or getattr(zone, "zone", None)  # zoneinfo, pytz
    if key:
        return key
    offset = zone.utcoffset(None)
    if offset is not None:  # a fixed offset such as dt.timezone(dt.timedelta(hours=2))
        if not offset:
            return "UTC"
        sign, offset = ("-", -offset) if offset < dt.timedelta(0) else ("+", offset)
        hours, rest = divmod(int(offset.total_seconds()), 3600)
        return f"{sign}{hours:02}:{rest // 60:02}"
    raise ValueError(f"time zone {zone!r} has no name spawnflow can store; use zoneinfo")


def zone_from_name(name: str) -> dt.tzinfo:
    """The time zone that :func:`zone_name` named."""
    if name == "UTC":
        return UTC
    if name[:1] in "+-" and ":" in name:
        hours, minutes = name[1:].split(":")
        offset = dt.timedelta(hours=int(hours), minutes=int(minutes))
        return dt.timezone(offset if name[0] == "+" else -offset)
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def aware(moment: dt.datetime | None, what: str) -> dt.datetime | None:
    """``moment`` with a time zone: naive datetimes are taken as UTC."""
    if moment is None:
        return None
    if not isinstance(moment, dt.datetime):
        raise ValueError(f"{what} {moment!r} must be a datetime")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
