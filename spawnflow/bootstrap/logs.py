"""Logging: events with fields through the standard library's loggers and handlers.

Every process configures logging once for its role: human-readable lines on the
console (coloured on a TTY, rendered by structlog's ConsoleRenderer) and JSON lines in
``<base_log_folder>/<role>.log``. spawnflow's own events (:func:`get_logger`) and the
records of libraries that log through the standard library (SQLAlchemy, Alembic, a
task's own ``logging``) go through the same formatters, so every line carries ``role``
and ``pid``. The JSON lines are rendered here, with msgspec: structlog is imported
only for the first console line, since its import (with rich, which it pulls in when
installed) was a third of a spawned task's start-up, for a process whose few lines go
to a file.

A fork child inherits its parent's handlers, open files and logger cache; calling
:func:`configure` again replaces all of that, which is why the launcher's child
entry does so before anything logs. Role and pid are looked up when an event is
written, never captured earlier, so a logger object created before a fork still
writes the child's own pid.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import sys
from pathlib import Path
from typing import Any

from spawnflow.bootstrap.logfiles import open_log_file

#: The attribute of a LogRecord that carries an event's fields.
FIELDS = "spawnflow_fields"

_role = "unconfigured"
_log_file: Path | None = None
_structlog_configured = False
_handlers: list[logging.Handler] = []


def _add_process(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    event.setdefault("role", _role)
    event.setdefault("pid", os.getpid())
    return event


def _add_record_fields(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    record = event.get("_record")
    fields = getattr(record, FIELDS, None)
    return {**fields, **event} if fields else event


def _add_record_time(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    record = event.get("_record")
    if record is not None:
        event.setdefault("timestamp", timestamp(record.created))
    return event


def timestamp(created: float) -> str:
    """RFC 3339 in UTC with microseconds, as every log line writes its time."""
    moment = dt.datetime.fromtimestamp(created, tz=dt.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


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


def _foreign_processors() -> list:
    """What a standard library record gets before the console renders it."""
    import structlog

    return [
        structlog.contextvars.merge_contextvars,
        _add_record_fields,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _add_process,
        _add_record_time,
    ]


class EventLogger:
    """Writes events with fields: ``log.info("task started", task_id="load")``.

    The event is a standard library record whose fields ride on the record, so both
    formatters (JSON lines and the console) write them; the record's time, role and pid
    are those of the process that writes it, a logger made before a fork included.
    """

    __slots__ = ("_logger",)

    def __init__(self, name: str | None = None) -> None:
        self._logger = logging.getLogger(name)

    @property
    def name(self) -> str:
        return self._logger.name

    def log(self, level: int, event: str, **fields: Any) -> None:
        """Write ``event`` at ``level`` (a ``logging`` level) with ``fields``."""
        self._write(level, event, None, fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._write(logging.DEBUG, event, None, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._write(logging.INFO, event, None, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._write(logging.WARNING, event, None, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._write(logging.ERROR, event, None, fields)

    def critical(self, event: str, **fields: Any) -> None:
        self._write(logging.CRITICAL, event, None, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error with the exception being handled, its traceback in the line."""
        self._write(logging.ERROR, event, True, fields)

    def _write(self, level: int, event: str, exc_info: Any, fields: dict[str, Any]) -> None:
        if self._logger.isEnabledFor(level):
            # stacklevel 3: the record's file and line are the caller's, not this module's.
            self._logger.log(level, event, exc_info=fields.pop("exc_info", exc_info),
                             extra={FIELDS: fields}, stacklevel=3)  # fmt: skip


class JsonLinesFormatter(logging.Formatter):
    """One JSON object per record (:func:`event_of`), with ``exception`` after an error."""

    def format(self, record: logging.LogRecord) -> str:
        event = event_of(record)
        exc_info = _exc_info(event.pop("exc_info", None)) or record.exc_info
        if exc_info:
            event["exception"] = self.formatException(exc_info)
        if record.stack_info:
            event["stack"] = self.formatStack(record.stack_info)
        return _dumps(event)


def event_of(record: logging.LogRecord) -> dict[str, Any]:
    """What a record says as an event: its fields, then ``event``, ``level``, ``logger``,
    ``role``, ``pid`` and ``timestamp``."""
    if isinstance(record.msg, dict):
        # An event of structlog's, its processors already applied (user code, or a
        # library, that logs through structlog, which is configured to hand it to us).
        return dict(record.msg)
    event = {}
    if "structlog" in sys.modules:
        event.update(sys.modules["structlog"].contextvars.get_contextvars())
    event.update(getattr(record, FIELDS, None) or {})
    for key in _LINE_KEYS.intersection(event):
        # A field named like one of the line's own keys (pid=<a child's pid>) is kept
        # under another name: the line's pid is always the writer's.
        event[f"{key}_field"] = event.pop(key)
    event["event"] = record.getMessage()
    event["level"] = record.levelname.lower()
    event["logger"] = record.name
    event["role"], event["pid"] = _role, os.getpid()
    event["timestamp"] = timestamp(record.created)
    return event


_LINE_KEYS = frozenset({"event", "level", "logger", "role", "pid", "timestamp"})


def _exc_info(value: Any) -> Any:
    """structlog's spellings of ``exc_info`` as the standard library's tuple."""
    if value is True:
        value = sys.exc_info()
    elif isinstance(value, BaseException):
        value = (type(value), value, value.__traceback__)
    return value if isinstance(value, tuple) and value[0] is not None else None


class ConsoleFormatter(logging.Formatter):
    """structlog's ConsoleRenderer, built when the first console line is written.

    Importing structlog (with rich, when installed) costs a spawned child 30 to 65 ms;
    a child that never writes to the console does not pay it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._formatter: logging.Formatter | None = None

    def format(self, record: logging.LogRecord) -> str:
        if self._formatter is None:
            self._formatter = _console_formatter()
        return self._formatter.format(record)


def _console_formatter() -> logging.Formatter:
    if not _structlog_configured:
        _configure_structlog()  # imported now: user code's structlog events reach us too
    import structlog

    renderer = structlog.dev.ConsoleRenderer(colors=console_colors(sys.stderr))
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_foreign_processors(),
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
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
        file_handler = open_log_file(
            log_file, level, JsonLinesFormatter(), create_folder=create_folder
        )
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
        handler.setFormatter(ConsoleFormatter())
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
    """Colour on a terminal, unless ``NO_COLOR`` is set to anything (no-color.org). On
    Windows only with colorama (a dependency there), without which structlog refuses
    colours with an error instead of printing."""
    if os.environ.get("NO_COLOR") or not _is_tty(stream):
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


def get_logger(name: str | None = None) -> EventLogger:
    """The logger of ``name`` for events with fields; ``role``, ``pid`` and the time are
    added to every line it writes. Importing nothing, it costs a child nothing until it
    writes to the console."""
    return EventLogger(name)


def role_log_file(base_folder: Path, role: str) -> Path:
    """Where the processes of ``role`` write their JSON lines."""
    return Path(base_folder) / f"{role}.log"
