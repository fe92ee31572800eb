"""Metrics: counters and timings, sent to StatsD when ``[metrics] statsd_host`` is set.

Each process gets its sink from its own settings snapshot, created on first use after
the snapshot is installed (a forked child makes its own: a UDP socket is cheap, and one
shared across a fork would interleave two processes' packets). Every metric is also
kept in memory, in :data:`recorded`, which is how tests read them.

    metrics.incr("scheduler.asset_partitions.evaluated", 12)
    metrics.timing("scheduler.asset_partitions.resync_pass_duration", 8.4)
    metrics.incr("scheduler.asset_partitions.resync_fired", 1, tags={"pass": "startup"})
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.errors import UserError


@dataclass(frozen=True)
class Sample:
    """One metric as it was sent: ``kind`` is ``count`` or ``timing`` (milliseconds)."""

    kind: str
    name: str
    value: float
    tags: tuple[tuple[str, str], ...] = ()


#: Every sample this process sent, oldest first (bounded: the newest 10,000).
recorded: list[Sample] = []
_LIMIT = 10_000

#: (pid and the options it was made for, the statsd client or None).
_client: tuple[tuple[Any, ...], Any] | None = None


def incr(name: str, value: float = 1, *, tags: Mapping[str, str] | None = None) -> None:
    """Add ``value`` to the counter ``name``."""
    _send(Sample("count", name, value, _tags(tags)))


def timing(name: str, milliseconds: float, *, tags: Mapping[str, str] | None = None) -> None:
    """Record that something took ``milliseconds``."""
    _send(Sample("timing", name, milliseconds, _tags(tags)))


def total(name: str, **tags: str) -> float:
    """The sum of the recorded samples of ``name`` with these ``tags`` (for tests)."""
    wanted = set(tags.items())
    return sum(s.value for s in recorded if s.name == name and wanted <= set(s.tags))


def _tags(tags: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((tags or {}).items()))


def _send(sample: Sample) -> None:
    recorded.append(sample)
    if len(recorded) > _LIMIT:
        del recorded[: len(recorded) - _LIMIT]
    client = _statsd()
    if client is None:
        return
    # StatsD has no tags: they become part of the name (DogStatsD-style tags would need
    # a server that reads them).
    name = ".".join([sample.name, *(f"{k}_{v}" for k, v in sample.tags)])
    if sample.kind == "count":
        client.incr(name, sample.value)
    else:
        client.timing(name, sample.value)


def _statsd() -> Any:
    global _client
    options = settings_module.current().metrics
    key = (os.getpid(), options.statsd_host, options.statsd_port, options.statsd_prefix)
    if _client is not None and _client[0] == key:
        return _client[1]
    client = None
    if options.statsd_host:
        try:
            import statsd
        except ImportError:
            raise UserError(
                "[metrics] statsd_host is set, but the statsd package is not installed: "
                "pip install 'spawnflow[statsd]'"
            ) from None
        client = statsd.StatsClient(
            options.statsd_host, options.statsd_port, prefix=options.statsd_prefix or None
        )
    _client = (key, client)
    return client
