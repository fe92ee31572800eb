"""Children of benchmarks/child_ready.py: light on imports, like a role's entry module."""

from __future__ import annotations

import os
import sys


def bare_target(connection) -> None:
    """The baseline child: say hello and leave."""
    connection.send_bytes(b"ready")


def bare_idle(connection) -> None:
    """The baseline idle child: report peak RSS, then wait for the parent's word to leave."""
    from spawnflow.bootstrap.platform import peak_rss_bytes

    connection.send_bytes(str(peak_rss_bytes()).encode())
    connection.recv_bytes()


def launcher_target(channel) -> None:
    """The launcher's trivial target: Ready was already sent by the bootstrap."""


def launcher_idle(channel) -> None:
    """Report this child's own peak RSS, then wait to be stopped."""
    from spawnflow.bootstrap import platform
    from spawnflow.comms import ResourceReport
    from spawnflow.processors.probe import wait_for_stop

    channel.send(
        ResourceReport(
            pid=os.getpid(), peak_rss_bytes=platform.peak_rss_bytes(), modules=len(sys.modules)
        )
    )
    wait_for_stop(channel)
