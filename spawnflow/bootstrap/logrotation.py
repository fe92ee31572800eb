"""A role's log file, rotated by size: ``<role>.log`` becomes ``<role>.log.1`` and so on.

Several processes may append to one role's file (the executor's workers share
``executor-worker.log``, the file parsers ``file-parser.log``). Each of them rotates it
when the file *at the path* reaches the size, and one that finds the path naming
another file than the one it holds open (another writer rotated it) opens the new
one instead of rotating again. Two writers that decide at the same instant may shift
the old files twice: a backup is then a line or two long; nothing is lost. On
Windows a file that another process holds open cannot be renamed: the rotation
fails, says so once on stderr, and the file grows until a later try succeeds.

A module of its own: ``logging.handlers`` costs a child a few milliseconds to import,
and a task process, whose file (the try's log) is never rotated, does not need it.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import stat
import time
from pathlib import Path

from spawnflow.bootstrap.logfiles import LogFileHandler, say_on_stderr, strerror_of

#: Seconds between two tries to rotate a file whose last rotation failed.
ROTATION_RETRY_SECONDS = 60.0


class RotatingLogFileHandler(LogFileHandler, logging.handlers.RotatingFileHandler):
    """A :class:`LogFileHandler` whose file is rotated once it reaches a size, safely
    when several processes append to it (see the module's docstring): a rotation that
    fails says so once and never costs a line."""

    #: The device and inode of the file this handler holds open (set by _open).
    _opened: tuple[int, int] | None = None
    _retry_at = 0.0
    _rotation_failing = False

    def __init__(self, path: Path, max_bytes: int, backup_count: int) -> None:
        logging.handlers.RotatingFileHandler.__init__(
            self, path, maxBytes=max_bytes, backupCount=backup_count, encoding="utf-8"
        )

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is not None and self.maxBytes > 0:
            try:
                self._rotate_if_due()
            except OSError as error:  # Windows: another process holds the file open
                self._rotation_failed(error)
        LogFileHandler.emit(self, record)  # reopens the file if the rotation closed it

    def _open(self):  # type: ignore[no-untyped-def]
        stream = super()._open()
        self._opened = _identity(os.fstat(stream.fileno()))
        return stream

    def _rotate_if_due(self) -> None:
        try:
            found = os.stat(self.baseFilename)
        except FileNotFoundError:
            found = None  # another writer renamed it and has not written yet
        if found is not None and not stat.S_ISREG(found.st_mode):
            return  # never rename a device or a pipe (a test's /dev/full, say)
        if found is None or _identity(found) != self._opened:
            self._reopen()  # rotated by another writer: follow it to the new file
            return
        # The size before this line: a rotated file may end up to one line larger.
        if found.st_size < self.maxBytes or time.monotonic() < self._retry_at:
            return
        self.doRollover()
        if self._rotation_failing:
            self._rotation_failing = False
            say_on_stderr(f"spawnflow: the log file {self.baseFilename} is rotated again")

    def _reopen(self) -> None:
        stream, self.stream = self.stream, None
        try:
            if stream is not None:
                stream.close()
            self.stream = self._open()
        except OSError:
            pass  # the line's write opens it again, and says so if it cannot

    def _rotation_failed(self, error: OSError) -> None:
        self._retry_at = time.monotonic() + ROTATION_RETRY_SECONDS
        if not self._rotation_failing:
            self._rotation_failing = True
            say_on_stderr(
                f"spawnflow: cannot rotate the log file {self.baseFilename} "
                f"({strerror_of(error)}; another process may hold it open); it grows until "
                "it can be rotated"
            )


def _identity(found: os.stat_result) -> tuple[int, int]:
    return found.st_dev, found.st_ino
