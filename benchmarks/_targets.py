"""Children of benchmarks/child_ready.py: light on imports, like a role's entry module."""

from __future__ import annotations

import os
import sys
import time


def bare_target(connection) -> None:
    """The baseline child: say hello with the CPU seconds its start cost, and leave.

    A new process's CPU times start at zero, under fork too, so ``process_time`` is
    what this child used from its birth to here."""
    connection.send_bytes(repr(time.process_time()).encode())


def bare_idle(connection) -> None:
    """The baseline idle child: report peak RSS, then wait for the parent's word to leave."""
    from spawnflow.bootstrap.platform import peak_rss_bytes

    connection.send_bytes(str(peak_rss_bytes()).encode())
    connection.recv_bytes()


def launcher_target(channel) -> None:
    """The launcher's trivial target (Ready was already sent by the bootstrap): report
    the CPU seconds from birth to here, and leave."""
    used, modules = time.process_time(), len(sys.modules)  # before the import below
    from spawnflow.comms import ResourceReport

    channel.send(ResourceReport(pid=os.getpid(), peak_rss_bytes=None, modules=modules,
                                cpu_seconds=used))  # fmt: skip


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


def launcher_role(channel, target: str) -> None:
    """Import a role's target module as the bootstrap does, say so, and leave: what a
    child of that role holds when it exits (benchmarks/child_exit.py)."""
    from spawnflow.bootstrap import launcher
    from spawnflow.comms import ResourceReport

    launcher.import_target(target)
    channel.send(ResourceReport(pid=os.getpid(), peak_rss_bytes=None, modules=len(sys.modules)))
