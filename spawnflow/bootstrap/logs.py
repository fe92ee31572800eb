"""Logging: structlog in front, the standard library's handlers behind.

Every process configures logging once for its role: human-readable lines on the
console (coloured on a TTY) and JSON lines in ``<base_log_folder>/<role>.log``.
Libraries that log through the standard library (SQLAlchemy, Alembic) go through
the same formatters, so their records carry ``role`` and ``pid`` too.

A fork child inherits its parent's handlers, open files and logger cache; calling
:func:`configure` again replaces all of that, which is why the launcher's child
entry does so before anything logs. Role and pid are looked up when an event is
written, never captured earlier, so a logger object created before a fork still
writes the child's own pid.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spawnflow.bootstrap.errors import UserError

if TYPE_CHECKING:
    from structlog.typing import Processor


class LogFileUnwritable(UserError):
    """A log file that cannot be opened for appending (a read-only or full disk)."""


_role = "unconfigured"
_log_file: Path | None = None
_structlog_configured = False
_handlers: list[logging.Handler] = []


def _add_process(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    event.setdefault("role", _role)
    event.setdefault("pid", os.getpid())
    return event


def _dumps(event: dict[str, Any], **_: Any) -> str:
    import msgspec

    return msgspec.json.encode(event, enc_hook=str).decode()


def _shared_processors() -> list:
    import structlog

    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _add_process,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


class _DeferredFormatter(logging.Formatter):
    """structlog's ProcessorFormatter, built when the first record is written.

    Importing structlog costs a spawned child about 30 ms (it pulls in asyncio); a
    child that never logs should not pay that before it reports ready.
    """

    def __init__(self, json_lines: bool):
        super().__init__()
        self._json_lines = json_lines
        self._formatter: logging.Formatter | None = None

    def format(self, record: logging.LogRecord) -> str:
        if self._formatter is None:
            self._formatter = _processor_formatter(self._json_lines)
        return self._formatter.format(record)


def _processor_formatter(json_lines: bool) -> logging.Formatter:
    import structlog

    renderers: list[Processor]
    if json_lines:
        renderers = [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_dumps),
        ]
    else:
        renderers = [structlog.dev.ConsoleRenderer(colors=console_colors(sys.stderr))]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderers],
    )


class PoolCleanupFilter(logging.Filter):
    """SQLAlchemy's pool logs an ERROR with a traceback when it cannot reset or close a
    connection it discards: during a database outage that is expected (the socket is
    gone) and the connection is replaced at its next checkout. Such a record becomes
    one WARNING line with the error's text, on every handler, so no traceback reaches
    the user for what spawnflow rides out."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("sqlalchemy.pool") and record.exc_info:
            error = record.exc_info[1]
            record.msg = f"{record.getMessage()} (discarded): {type(error).__name__}: {error}"
            record.args, record.exc_info, record.exc_text = (), None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


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


def open_log_file(log_file: Path, level: str, *, create_folder: bool = True) -> logging.Handler:
    """A handler appending JSON lines to ``log_file``, opened now: a file that cannot
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
    handler.setFormatter(_DeferredFormatter(json_lines=True))
    return handler


def _configure_structlog() -> None:
    global _structlog_configured
    import structlog

    structlog.configure(
        processors=[*_shared_processors(), structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: a logger bound before a fork must follow the child's configuration.
        cache_logger_on_first_use=False,
    )
    _structlog_configured = True


def configure(
    role: str,
    *,
    level: str = "INFO",
    log_file: Path | None = None,
    console: bool = True,
    console_level: str | None = None,
    create_folder: bool = True,
) -> None:
    """Configure logging for this process, replacing whatever it had.

    Args:
        role: the process role, written into every event and naming the log file.
        level: lowest level written to ``log_file``.
        log_file: JSON-lines file to append to; its folder is created. None: no file.
            One that cannot be opened raises :class:`LogFileUnwritable`.
        console: write human-readable lines to stderr.
        console_level: lowest level on the console (defaults to ``level``).
        create_folder: create ``log_file``'s folder (the launcher does it for its children).
    """
    global _role, _log_file
    # First: a log file that cannot be written leaves the old configuration in place.
    file_handler = None
    if log_file is not None:
        file_handler = open_log_file(log_file, level, create_folder=create_folder)
    _role, _log_file = role, log_file
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    _handlers.clear()

    levels = []
    quiet_pool = PoolCleanupFilter()
    if file_handler is not None:
        file_handler.addFilter(quiet_pool)
        root.addHandler(file_handler)
        _handlers.append(file_handler)
        levels.append(logging.getLevelName(level))
    if console:
        handler = logging.StreamHandler(sys.stderr)
        handler.addFilter(quiet_pool)
        handler.setLevel(console_level or level)
        handler.setFormatter(_DeferredFormatter(json_lines=False))
        root.addHandler(handler)
        _handlers.append(handler)
        levels.append(logging.getLevelName(console_level or level))
    root.setLevel(min(levels) if levels else logging.WARNING)
    if "structlog" in sys.modules:
        # Context bound in a fork parent (a run id, say) is not this process's.
        sys.modules["structlog"].contextvars.clear_contextvars()
    if "structlog" in sys.modules and not _structlog_configured:
        # Already imported (by a library, or the parent before a fork): configure it
        # now, so that nothing logs through structlog's defaults. Its configuration
        # does not depend on the role, so what a fork child inherits stays valid.
        _configure_structlog()


def console_colors(stream: Any) -> bool:
    """Colour on a terminal. On Windows only with colorama (a dependency there), without
    which structlog refuses colours with an error instead of printing."""
    if not _is_tty(stream):
        return False
    if sys.platform == "win32":
        import importlib.util

        return importlib.util.find_spec("colorama") is not None
    return True


def _is_tty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def flush() -> None:
    """Flush the handlers this module installed (and only those)."""
    for handler in _handlers:
        try:
            handler.flush()
        except (OSError, ValueError):
            pass


def current_role() -> str:
    """The role this process configured logging for."""
    return _role


def current_log_file() -> Path | None:
    """The JSON-lines file this process writes, if any."""
    return _log_file


def get_logger(name: str | None = None, **bound: Any):
    """A structlog logger; ``role`` and ``pid`` are added to every event it writes.

    The first call in a process imports and configures structlog.
    """
    if not _structlog_configured:
        _configure_structlog()
    import structlog

    return structlog.stdlib.get_logger(name, **bound)


def role_log_file(base_folder: Path, role: str) -> Path:
    """Where the processes of ``role`` write their JSON lines."""
    return Path(base_folder) / f"{role}.log"
