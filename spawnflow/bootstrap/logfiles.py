"""A process's log file: opened at start-up with one clear sentence when it cannot be,
and written on through a full or read-only disk without a traceback per line."""

from __future__ import annotations

import logging
import sys
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
            _say(f"spawnflow: the log file {self.baseFilename} can be written again")

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            super().handleError(record)
            return
        self._line_failed = True
        if not self.failing:
            self.failing = True
            _say(f"spawnflow: cannot write the log file {self.baseFilename} ({_why(error)}); "
                 "its lines are dropped until it can be written again")  # fmt: skip
        stream, self.stream = self.stream, None  # the next line opens the file again
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass  # no stderr left either: nothing more to do


def _why(error: OSError) -> str:
    return error.strerror or type(error).__name__


def open_log_file(
    log_file: Path, level: str, formatter: logging.Formatter, *, create_folder: bool = True
) -> logging.Handler:
    """A handler appending ``formatter``'s lines to ``log_file``, opened now: a file that cannot
    be written is one sentence (:class:`LogFileUnwritable`) at start-up, not a traceback
    at the first line."""
    try:
        if create_folder:
            log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = LogFileHandler(log_file, encoding="utf-8")
    except OSError as error:
        raise LogFileUnwritable(
            f"cannot write the log file {log_file} ({_why(error)}); make its folder "
            "writable or set [logging] base_log_folder to one that is"
        ) from None
    handler.setLevel(level)
    handler.setFormatter(formatter)
    return handler
