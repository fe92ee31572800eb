"""Keeps a forkserver alive when a client goes away in the middle of its request.

multiprocessing's forkserver serves one request at a time in its main loop, and only an
aborted ``accept`` is forgiven there: a client that dies after it connected and before
it sent its descriptors (an ``EOFError`` in ``recvfds`` up to Python 3.13), or in the
middle of the key exchange (a connection reset, Python 3.14), ends the server, and the
kernel then signals every child it forked that its parent died. With one server per
launching process that only hit a process that was dying anyway; a server that a whole
tree shares (:mod:`spawnflow.bootstrap.forkservers`) must outlive any one client, since a
cold stop kills launchers at any point of a launch.

Importing this module in a server (it is first in every preload) turns those errors
into the aborted connection the loop forgives; the server closes that connection and
serves the next one. A fork the kernel refuses for now (EAGAIN: a limit on processes;
ENOMEM) is tried again for a while before it ends the server. A process the server
forks gets the originals back.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
from collections.abc import Callable
from multiprocessing import connection, forkserver, reduction
from typing import Any, cast

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.platform import _posix

#: The functions a server runs on a client's connection, by module and name.
_GUARDED = ((reduction, "recvfds"), (connection, "deliver_challenge"),
            (connection, "answer_challenge"))  # fmt: skip
#: Seconds a refused fork is tried again for, the pause doubling from 10 ms.
FORK_PATIENCE = 30.0
_originals: dict[tuple[Any, str], Callable[..., Any]] = {}


def install() -> None:
    """Guard this process's server loop (see the module's docstring); idempotent."""
    for module, name in _GUARDED:
        if (module, name) in _originals or not hasattr(module, name):
            continue
        original = getattr(module, name)
        _originals[module, name] = original
        setattr(module, name, _forgiving(original))
    loop = cast(Any, forkserver)  # its module globals: typeshed lists none
    if (forkserver, "os") not in _originals:
        # The loop calls ``os.fork`` through its module's ``os``: a stand-in there
        # changes nothing for the rest of the process.
        _originals[forkserver, "os"] = loop.os
        loop.os = _PatientOs()


def uninstall() -> None:
    """The originals again (in a child the server forked)."""
    for (module, name), original in _originals.items():
        setattr(module, name, original)
    _originals.clear()


def _forgiving(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (EOFError, ConnectionError, RuntimeError) as gone:  # RuntimeError: ancdata
            aborted = f"the client went away: {gone!r}"
            raise ConnectionAbortedError(errno.ECONNABORTED, aborted) from gone

    return guarded


class _PatientOs:
    """``os`` for the server's loop, whose ``fork`` waits out a refusal for a while."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def fork() -> int:
        if sys.platform == "win32":
            raise OSError(errno.ENOSYS, "Windows has no fork")
        return _posix.fork_patiently(FORK_PATIENCE)


install()
platforms.at_fork_in_child(uninstall)
