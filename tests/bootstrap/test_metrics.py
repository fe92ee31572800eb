"""Metrics: kept in memory always, sent to a StatsD server over UDP when one is set."""

from __future__ import annotations

import socket

from spawnflow.bootstrap import metrics


def test_metrics_reach_a_statsd_server_and_stay_readable_in_memory(make_settings):
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(60)  # a bound for a lost datagram, not a wait for a result
    try:
        make_settings(**{"metrics.statsd_host": "127.0.0.1",
                         "metrics.statsd_port": str(server.getsockname()[1])})  # fmt: skip
        before = metrics.total("scheduler.test_counter", pass_="x")
        metrics.incr("scheduler.test_counter", 3, tags={"pass_": "x"})
        metrics.timing("scheduler.test_timing", 12.5)
        received = {server.recv(1024).decode() for _ in range(2)}
    finally:
        server.close()
    assert received == {"spawnflow.scheduler.test_counter.pass__x:3|c",
                        "spawnflow.scheduler.test_timing:12.500000|ms"}  # fmt: skip
    assert metrics.total("scheduler.test_counter", pass_="x") == before + 3


def test_without_a_statsd_host_metrics_are_only_kept_in_memory(make_settings):
    make_settings()
    before = len(metrics.recorded)
    metrics.incr("scheduler.only_in_memory")
    assert metrics.recorded[before:] == [metrics.Sample("count", "scheduler.only_in_memory", 1)]
