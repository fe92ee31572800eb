"""What the tests expect of the OS they run on (or simulate), and how they act like it.

The expectations follow spawnflow's current platform, which the OS simulation sets in
every process, so a test reads the same natively and under a simulated Windows or macOS.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from spawnflow.bootstrap import platform as platforms

#: Signals between processes and process groups (Linux, macOS).
POSIX = platforms.current().process_groups
#: How a process that psutil's ``kill()`` ended is described: SIGKILL on POSIX,
#: ``TerminateProcess(handle, 15)`` on Windows.
KILLED = "killed by SIGKILL" if POSIX else "exited with code 15"
#: How a process that crashed on a bad pointer is described.
SEGFAULT = "killed by SIGSEGV" if POSIX else "exited with code 0xC0000005 (access violation)"
#: What a Dag file or task runs to end its own process the hard way, on every OS.
KILL_MYSELF = "import psutil; psutil.Process().kill()"


def simulation():
    """The OS simulation module when this run simulates an OS, else None."""
    module = sys.modules.get("simulated_os")
    return module if module is not None and module.active else None


def start_in_console(args: list[str], **kwargs) -> subprocess.Popen:
    """Start a command the way a terminal starts one: in a process group of its own, so
    that :func:`press_ctrl_c` reaches what the terminal's (or console's) Ctrl-C reaches."""
    return subprocess.Popen(args, start_new_session=True, **kwargs)


def press_ctrl_c(process: subprocess.Popen) -> None:
    """Ctrl-C on the terminal that runs ``process`` (started by :func:`start_in_console`).

    A terminal sends SIGINT to its foreground group, where spawnflow's children are not;
    a Windows console sends Ctrl-C to every process attached to it, which the Windows
    simulation reproduces: no process there leaves the group.
    """
    ctrl_c_on_console(process.pid)


def ctrl_c_on_console(leader: int) -> None:
    """Ctrl-C on the terminal whose foreground group ``leader`` leads (a process that
    :func:`start_in_console` started, or that process itself)."""
    _to_console(leader, signal.SIGINT)


def press_ctrl_break(process: subprocess.Popen) -> None:
    """Ctrl-Break on the Windows console that runs ``process``: to every process on it."""
    if not platforms.current().console_broadcast:
        pytest.skip("Ctrl-Break exists on Windows consoles only")
    _to_console(process.pid, signal.SIGBREAK)  # type: ignore[attr-defined]


def _to_console(leader: int, signum: int) -> None:
    simulated = simulation()
    if simulated is not None:
        simulated.console_interrupt(leader, signum)
    elif sys.platform == "win32":
        pytest.skip("a Windows console's Ctrl-C needs a console of the test's own")
    else:
        os.killpg(leader, signum)
