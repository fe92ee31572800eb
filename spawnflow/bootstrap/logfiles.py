"""A process's log file: opened at start-up with one clear sentence when it cannot be,
and written on through a full or read-only disk without a traceback per line. (A
role's file is rotated by size: :mod:`logrotation`.)"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

from spawnflow.bootstrap.errors import UserError


class LogFileUnwritable(UserError):
    """A log file that cannot be opened for appending (a read-only or full disk)."""


class LogFileHandler(logging.FileHandler):
    """A file handler that outlives its disk: a write that fails (the disk filled or
    turned read-only) says so once on stderr and drops lines until writes work again,
    instead of printing a traceback per line or ending the process."""

    failing = False
    _line_failed = False

    def emit(self, record: logging.LogRecord) -> None:
        self._line_failed = False
        if self.stream is None:  # closed after a failure: try the file again
            try:
                self.stream = self._open()
            except OSError:
                self.handleError(record)
                return
        logging.StreamHandler.emit(self, record)  # calls handleError if the write fails
        if self.failing and not self._line_failed:
            self.failing = False
            say_on_stderr(f"spawnflow: the log file {self.baseFilename} can be written again")

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            super().handleError(record)
            return
        self._line_failed = True
        if not self.failing:
            self.failing = True
            say_on_stderr(
                f"spawnflow: cannot write the log file {self.baseFilename} "
                f"({strerror_of(error)}); its lines are dropped until it can be written again"
            )
        stream, self.stream = self.stream, None  # the next line opens the file again
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def say_on_stderr(line: str) -> None:
    """Tell the user about the log file itself, where a log line cannot go."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass  # no stderr left either: nothing more to do


def strerror_of(error: OSError) -> str:
    """Why an operation on a file failed, in the OS's words."""
    return error.strerror or type(error).__name__


def open_log_file(
    log_file: Path, level: str, formatter: logging.Formatter, *, create_folder: bool = True,
    handler_class: Callable[[Path], LogFileHandler] | None = None,
) -> logging.Handler:  # fmt: skip
    """A handler appending ``formatter``'s lines to ``log_file``, opened now: a file that cannot
    be written is one sentence (:class:`LogFileUnwritable`) at start-up, not a traceback
    at the first line. ``handler_class``: makes the handler of a path (one that rotates
    the file, say); None: a :class:`LogFileHandler`."""
    try:
        if create_folder:
            log_file.parent.mkdir(parents=True, exist_ok=True)
        if handler_class is not None:
            handler = handler_class(log_file)
        else:
            handler = LogFileHandler(log_file, encoding="utf-8")
    except OSError as error:
        raise LogFileUnwritable(
            f"cannot write the log file {log_file} ({strerror_of(error)}); make its folder "
            "writable or set [logging] base_log_folder to one that is"
        ) from None
    handler.setLevel(level)
    handler.setFormatter(formatter)
    return handler
