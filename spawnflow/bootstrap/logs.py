"""Logging: events with fields through the standard library's loggers and handlers.

Every process configures logging once for its role: JSON lines in
``<base_log_folder>/<role>.log`` (rotated by size, see :mod:`logfiles`) and, on the
console, human-readable lines (coloured on a TTY, rendered by structlog's
ConsoleRenderer) or, with ``[logging] format = json``, the same JSON lines as the
file. spawnflow's own events (:func:`get_logger`) and the records of libraries that
log through the standard library (SQLAlchemy, Alembic, a task's own ``logging``) go
through the same formatters, so every line carries ``role`` and ``pid``.

Every JSON line has one shape (:func:`line`), whoever writes it (a task supervisor
writes a try's log itself): ``timestamp`` (RFC 3339 UTC ending in ``Z``, see
:func:`timestamp`), ``level``, ``logger``, ``event``, ``pid``, ``role``, then the
event's own fields (those that are None are left out) and ``exception`` after an
error. The JSON lines are rendered here, with msgspec: structlog is imported only for
the first console line in text, since its import (with rich, which it pulls in when
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
import functools
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spawnflow.bootstrap.logfiles import open_log_file

#: The attribute of a LogRecord that carries an event's fields.
FIELDS = "spawnflow_fields"

#: The keys every JSON line starts with, in this order; the event's fields follow.
LINE_KEYS = ("timestamp", "level", "logger", "event", "pid", "role")

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


def _add_time(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """The time of a structlog event, spelled as every other line's."""
    event.setdefault("timestamp", timestamp(time.time()))
    return event


def _drop_none(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """A field that is None says nothing: ``reason=None`` is not written."""
    return {key: value for key, value in event.items() if value is not None}


def timestamp(created: float) -> str:
    """RFC 3339 in UTC with microseconds and a ``Z``, as every log line writes its time:
    ``2025-01-31T12:00:00.000000Z``."""
    moment = dt.datetime.fromtimestamp(created, tz=dt.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def line(
    *, level: str, logger: str, event: str, pid: int, role: str,
    fields: Mapping[str, Any] = {}, created: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One log line in the shape every JSON line has: :data:`LINE_KEYS` in that order,
    then ``fields`` without those that are None. A field named like one of the line's
    keys (``pid=<a child's pid>``) is kept as ``<key>_field``: the line's are the
    writer's. ``created``: the event's time (``time.time()``), now if None."""
    shaped: dict[str, Any] = {
        "timestamp": timestamp(time.time() if created is None else created),
        "level": level, "logger": logger, "event": event, "pid": pid, "role": role,
    }  # fmt: skip
    for key, value in fields.items():
        if value is not None:
            shaped[f"{key}_field" if key in shaped else key] = value
    return shaped


def dumps(shaped: Mapping[str, Any]) -> str:
    """A line (:func:`line`) as JSON; values JSON lacks (paths, times) as their text."""
    import msgspec

    return msgspec.json.encode(shaped, enc_hook=str).decode()


def _shared_processors() -> list:
    import structlog

    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _add_process,
        _add_time,
        _drop_none,
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
        _drop_none,
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
        return dumps(event)


def event_of(record: logging.LogRecord) -> dict[str, Any]:
    """What a record says as a line (:func:`line`): the writer's time, level, logger,
    event, pid and role, then the event's fields."""
    if isinstance(record.msg, dict):
        # An event of structlog's, its processors already applied (user code, or a
        # library, that logs through structlog, which is configured to hand it to us).
        fields = dict(record.msg)
        moment = fields.pop("timestamp", None)
        shaped = line(
            level=str(fields.pop("level", record.levelname.lower())),
            logger=str(fields.pop("logger", record.name)),
            event=str(fields.pop("event", "")),
            pid=fields.pop("pid", os.getpid()), role=fields.pop("role", _role),
            fields=fields, created=record.created,
        )  # fmt: skip
        if isinstance(moment, str):
            shaped["timestamp"] = moment  # the event's own, spelled by _add_time
        return shaped
    fields = {}
    if "structlog" in sys.modules:
        fields.update(sys.modules["structlog"].contextvars.get_contextvars())
    fields.update(getattr(record, FIELDS, None) or {})
    return line(level=record.levelname.lower(), logger=record.name, event=record.getMessage(),
                pid=os.getpid(), role=_role, fields=fields, created=record.created)  # fmt: skip


def _exc_info(value: Any) -> Any:
    """structlog's spellings of ``exc_info`` as the standard library's tuple."""
    if value is True:
        value = sys.exc_info()
    elif isinstance(value, BaseException):
        value = (type(value), value, value.__traceback__)
    return value if isinstance(value, tuple) and value[0] is not None else None


class ConsoleFormatter(logging.Formatter):
    """The console's lines, as ``console_format`` says: ``auto``, text (structlog's
    ConsoleRenderer, built when the first text line is written) coloured on a terminal;
    ``text``, never coloured; ``json``, the log file's JSON lines. None follows
    ``[logging] format`` of the settings this process installed, read at each line:
    the CLI configures its logging before it resolves settings.

    Importing structlog (with rich, when installed) costs a spawned child 30 to 65 ms;
    a child that never writes text to the console does not pay it.
    """

    def __init__(self, console_format: str | None = None) -> None:
        super().__init__()
        self.console_format = console_format
        self._text: dict[bool, logging.Formatter] = {}
        self._json = JsonLinesFormatter()

    def format(self, record: logging.LogRecord) -> str:
        chosen = self.console_format or configured_format()
        if chosen == "json":
            return self._json.format(record)
        colors = chosen == "auto" and console_colors(sys.stderr)
        if colors not in self._text:
            self._text[colors] = _console_formatter(colors)
        return self._text[colors].format(record)


def configured_format() -> str:
    """``[logging] format`` of this process's settings; ``auto`` before it has any."""
    snapshot = _installed_settings()
    return snapshot.logging.format if snapshot is not None else "auto"


def _installed_settings() -> Any:
    """This process's settings snapshot, or None. Looked up without an import: settings
    import this module's neighbours, and a process that has none imported none."""
    settings = sys.modules.get("spawnflow.bootstrap.settings")
    return settings.installed() if settings is not None else None


def _console_formatter(colors: bool) -> logging.Formatter:
    if not _structlog_configured:
        _configure_structlog()  # imported now: user code's structlog events reach us too
    import structlog

    renderer = structlog.dev.ConsoleRenderer(colors=colors)
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
    console_format: str | None = None,
    create_folder: bool = True,
    rotate: bool | None = None,
) -> None:
    """Configure logging for this process, replacing whatever it had.

    Args:
        role: the process role, written into every event and naming the log file.
        level: lowest level written to ``log_file``.
        log_file: JSON-lines file to append to; its folder is created. None: no file.
            One that cannot be opened raises :class:`LogFileUnwritable`.
        console: write log lines to stderr.
        console_level: lowest level on the console (defaults to ``level``).
        console_format: ``auto``, ``text`` or ``json`` (see :class:`ConsoleFormatter`);
            None: ``[logging] format`` of the settings installed when a line is written.
        create_folder: create ``log_file``'s folder (the launcher does it for its children).
        rotate: rotate ``log_file`` at ``[logging] max_file_size``, keeping
            ``[logging] backup_count`` old files, as the installed settings say (none
            installed: never). None: when ``log_file`` is the role's own file
            (:func:`role_log_file`); a file named otherwise, such as a try's log, is
            not rotated.
    """
    global _role, _log_file
    # First: a log file that cannot be written leaves the old configuration in place.
    file_handler = None
    if log_file is not None:
        file_handler = open_log_file(
            log_file, level, JsonLinesFormatter(), create_folder=create_folder,
            handler_class=_rotating_handler(role, log_file, rotate),
        )  # fmt: skip
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
        handler.setFormatter(ConsoleFormatter(console_format))
        root.addHandler(handler)
        _handlers.append(handler)
        levels.append(logging.getLevelName(console_level or level))
    root.setLevel(min(levels) if levels else logging.WARNING)
    if "structlog" in sys.modules:
        # Context bound in a fork parent (a run id, say) is not this process's.
        sys.modules["structlog"].contextvars.clear_contextvars()
    # Already imported (by a library, or the parent before a fork): configure it now,
    # so that nothing logs through structlog's defaults. Its configuration does not
    # depend on the role, so what a fork child inherits stays valid.
    adopt_structlog()


def adopt_structlog() -> None:
    """Send structlog's events through these handlers if structlog was imported since
    :func:`configure` (by a Dag file, say), as they are when it was imported before;
    else its default configuration prints them, rendered, on stdout. A process that
    did not import structlog does not import it here."""
    if "structlog" in sys.modules and not _structlog_configured:
        _configure_structlog()


def _rotating_handler(role: str, log_file: Path, rotate: bool | None) -> Any:
    """What makes the handler of a file that rotates (see :func:`configure`), or None."""
    snapshot = _installed_settings()
    if snapshot is None or rotate is False or not snapshot.logging.max_file_size:
        return None
    if rotate is None and log_file != role_log_file(snapshot.logging.base_log_folder, role):
        return None
    # Imported only here: logging.handlers costs a task process, whose file (the try's
    # log) never rotates, a few milliseconds.
    from spawnflow.bootstrap.logrotation import RotatingLogFileHandler

    return functools.partial(RotatingLogFileHandler, max_bytes=snapshot.logging.max_file_size,
                             backup_count=snapshot.logging.backup_count)  # fmt: skip


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
