"""Partition mappers: which partition of a Dag's run an input asset's partition counts
for, and which input partitions that run needs.

A Dag scheduled on partitioned assets gets one pending run per target partition; it
fires once, for every asset of its condition, each partition the target needs has an
event. Keys are text: hours ``YYYY-MM-DDTHH`` (UTC), days ``YYYY-MM-DD``, ISO weeks
``YYYY-Www``, months ``YYYY-MM``; days, weeks and months are the Dag's time zone's.

A built-in mapper is plain data (it serialises with the Dag; the scheduler never
imports a Dag file), one of: :class:`Identity` (a run per input partition),
:class:`HourToDay`, :class:`DayToWeek`, :class:`DayToMonth`. A mapper of your own is a
subclass of :class:`CustomMapper` with one method; it is user code, so it runs where
Dag files run (the Dag processor's file parser), never in a process that holds the
database.
"""

from __future__ import annotations

import abc
import datetime as dt
from typing import Union

import msgspec

UTC = dt.UTC
#: The longest partition key (characters) a run or an event may have.
MAX_PARTITION_KEY_LENGTH = 250


class PartitionMapper(msgspec.Struct, frozen=True, tag_field="kind"):
    """Base of the mappers: :meth:`target` maps an input partition key to the key of
    the run it counts for; :meth:`needed`, the input keys that run waits for (None:
    any one event of the input)."""

    def target(self, key: str, zone: dt.tzinfo) -> str:
        raise NotImplementedError

    def needed(self, target: str, zone: dt.tzinfo) -> list[str] | None:
        return None


class Identity(PartitionMapper, frozen=True, tag="identity"):
    """The run's partition is the input's: a run per input partition."""

    def target(self, key: str, zone: dt.tzinfo) -> str:
        return key


class HourToDay(PartitionMapper, frozen=True, tag="hour_to_day"):
    """Hourly input (``YYYY-MM-DDTHH``, UTC) rolled up into the Dag's local day; the run
    waits for every hour of that day (23 or 25 across a daylight-saving change)."""

    def target(self, key: str, zone: dt.tzinfo) -> str:
        return _hour(key).astimezone(zone).date().isoformat()

    def needed(self, target: str, zone: dt.tzinfo) -> list[str]:
        day = _day(target)
        start = dt.datetime.combine(day, dt.time(), zone).astimezone(UTC)
        end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), zone).astimezone(UTC)
        hours, moment = [], start
        while moment < end:
            hours.append(moment.strftime("%Y-%m-%dT%H"))
            moment += dt.timedelta(hours=1)
        return hours


class DayToWeek(PartitionMapper, frozen=True, tag="day_to_week"):
    """Daily input (``YYYY-MM-DD``) rolled up into its ISO week (``YYYY-Www``)."""

    def target(self, key: str, zone: dt.tzinfo) -> str:
        year, week, _ = _day(key).isocalendar()
        return f"{year}-W{week:02}"

    def needed(self, target: str, zone: dt.tzinfo) -> list[str]:
        try:
            monday = dt.date.fromisoformat(f"{target}-1")
        except ValueError:
            raise ValueError(f"partition key {target!r} is not an ISO week (YYYY-Www)") from None
        return [(monday + dt.timedelta(days=n)).isoformat() for n in range(7)]


class DayToMonth(PartitionMapper, frozen=True, tag="day_to_month"):
    """Daily input (``YYYY-MM-DD``) rolled up into its month (``YYYY-MM``)."""

    def target(self, key: str, zone: dt.tzinfo) -> str:
        return _day(key).strftime("%Y-%m")

    def needed(self, target: str, zone: dt.tzinfo) -> list[str]:
        first = _day(f"{target}-01")
        following = (first + dt.timedelta(days=32)).replace(day=1)
        return [(first + dt.timedelta(days=n)).isoformat() for n in range((following - first).days)]


class CustomMapper(abc.ABC):
    """Base of a partition mapper of your own: subclass it and write :meth:`target`.

    ``target(key)`` returns the partition key of the run an input partition ``key``
    counts for, or raises (``ValueError`` say) for a key that counts for none: the
    event is then left out, with a warning naming the Dag, the asset and the key.

    It runs in the Dag processor's file parser, with your Dag file loaded: an event is
    mapped at the Dag processor's next look (``[dag_processor] poll_interval``), which
    parses the Dag's file for it. Until then, and while the file has an import error,
    the event waits; nothing is lost. A run fires once every input asset has at least
    one event mapped to its key (there is no window of needed partitions, as
    :class:`HourToDay` has). A mapper that hangs is the file's parse timeout.

    Example::

        class RegionDay(CustomMapper):
            \"\"\"``eu/2026-01-31`` counts for the run of ``2026-01-31``.\"\"\"

            def target(self, key: str) -> str:
                region, day = key.split("/")
                return day
    """

    @abc.abstractmethod
    def target(self, key: str) -> str:
        """The partition key of the run that input partition ``key`` counts for."""


class Custom(PartitionMapper, frozen=True, tag="custom"):
    """A :class:`CustomMapper` as the serialized Dag records it: the name of its class.

    Only the file parser, with the Dag file loaded, can call the mapper itself."""

    name: str


def recorded(mapper: CustomMapper) -> Custom:
    """What the serialized Dag keeps of ``mapper``."""
    kind = type(mapper)
    if kind.__module__.startswith("spawnflow_dagfile_"):  # defined in the Dag file itself
        return Custom(name=kind.__qualname__)
    return Custom(name=f"{kind.__module__}.{kind.__qualname__}")


#: Every mapper, as the serialized Dag holds it.
Mapper = Union[Identity, HourToDay, DayToWeek, DayToMonth, Custom]  # noqa: UP007 - msgspec needs the Union object


def _hour(key: str) -> dt.datetime:
    try:
        return dt.datetime.strptime(key, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"partition key {key!r} is not an hour (YYYY-MM-DDTHH, UTC)") from None


def _day(key: str) -> dt.date:
    try:
        return dt.date.fromisoformat(key)
    except ValueError:
        raise ValueError(f"partition key {key!r} is not a day (YYYY-MM-DD)") from None
