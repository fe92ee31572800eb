"""Logging in one process: JSON lines with role and pid, stdlib records included."""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import os
import re
import sys

import pytest

from spawnflow.bootstrap import logs


@pytest.fixture(autouse=True)
def _restore_root_logging():
    """These tests reconfigure the process's logging; give pytest its handlers back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_events_and_stdlib_records_reach_the_role_file_as_json(tmp_path, capsys):
    log_file = tmp_path / "logs" / "scheduler.log"
    logs.configure(
        "scheduler", level="INFO", log_file=log_file, console=True, console_level="WARNING"
    )
    logs.get_logger("spawnflow.test").info("loop started", turn=1)
    logging.getLogger("alembic.runtime.migration").info("Running upgrade")
    logs.get_logger("spawnflow.test").debug("too detailed")
    for handler in logging.getLogger().handlers:
        handler.flush()

    events = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [e["event"] for e in events] == ["loop started", "Running upgrade"]
    assert all(e["role"] == "scheduler" and isinstance(e["pid"], int) for e in events)
    assert events[0]["turn"] == 1
    assert events[0]["level"] == "info"
    assert "loop started" not in capsys.readouterr().err  # console shows warnings only


def test_a_pool_cleanup_error_is_one_warning_line_without_a_traceback(tmp_path, capsys):
    log_file = tmp_path / "logs" / "scheduler.log"
    logs.configure("scheduler", level="INFO", log_file=log_file, console=True,
                   console_level="WARNING")  # fmt: skip
    try:
        raise ConnectionResetError("server closed the connection unexpectedly")
    except ConnectionResetError:  # what SQLAlchemy's pool logs when a reset fails
        logging.getLogger("sqlalchemy.pool.impl.QueuePool").error(
            "Exception during reset or similar", exc_info=True
        )
    logs.flush()

    (event,) = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert event["level"] == "warning"
    assert event["event"] == (
        "Exception during reset or similar (discarded): "
        "ConnectionResetError: server closed the connection unexpectedly"
    )
    assert "exception" not in event
    console = capsys.readouterr().err
    assert "server closed the connection unexpectedly" in console
    assert "Traceback" not in console


def test_configure_replaces_the_previous_handlers(tmp_path):
    logs.configure("first", log_file=tmp_path / "first.log", console=False)
    logs.configure("second", log_file=tmp_path / "second.log", console=False)
    logs.get_logger().warning("only in second")
    for handler in logging.getLogger().handlers:
        handler.flush()
    assert len(logging.getLogger().handlers) == 1
    assert "only in second" in (tmp_path / "second.log").read_text()
    assert "only in second" not in (tmp_path / "first.log").read_text()  # opened, then let go
    assert logs.current_role() == "second"


class _Terminal:
    def isatty(self) -> bool:
        return True


def test_console_colours_on_windows_need_colorama_and_spawnflow_requires_it_there(monkeypatch):
    from importlib import metadata

    # structlog raises instead of printing when colours are asked for on Windows without
    # colorama: spawnflow depends on it there, and asks for colours only when it is there.
    requirements = metadata.requires("spawnflow") or []
    colorama = [r.split(";")[1].strip() for r in requirements if r.startswith("colorama")]
    assert [marker.replace("'", '"') for marker in colorama] == ['sys_platform == "win32"']
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert logs.console_colors(_Terminal()) is False


def test_console_colours_only_on_a_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert logs.console_colors(_Terminal()) is (sys.platform != "win32" or _has_colorama())
    assert logs.console_colors(io.StringIO()) is False


def test_no_color_set_to_anything_turns_colours_off(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")  # no-color.org: present and not empty
    assert logs.console_colors(_Terminal()) is False


def _has_colorama() -> bool:
    return importlib.util.find_spec("colorama") is not None


def test_an_events_fields_and_error_reach_the_file_and_the_console_alike(tmp_path, capsys):
    log_file = tmp_path / "task.log"
    logs.configure("task", level="INFO", log_file=log_file, console=True)
    try:
        raise KeyError("missing")
    except KeyError:
        logs.get_logger("spawnflow.task").exception("task failed", try_number=2)
    logs.flush()

    (event,) = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert list(event) == ["timestamp", "level", "logger", "event", "pid", "role",
                           "try_number", "exception"]  # fmt: skip
    assert (event["event"], event["level"], event["try_number"]) == ("task failed", "error", 2)
    assert event["exception"].startswith("Traceback")
    assert event["exception"].endswith("KeyError: 'missing'")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", event["timestamp"])
    console = capsys.readouterr().err
    # The same line on the console, with the same time and the same fields.
    assert {event["timestamp"], "try_number=2", "role=task"} <= set(console.split())


def test_a_field_named_like_a_key_of_the_line_keeps_its_value_and_the_line_its_own(tmp_path):
    log_file = tmp_path / "triggerer.log"
    logs.configure("triggerer", level="INFO", log_file=log_file)
    logs.get_logger("spawnflow.test").info("child started", pid=1, role="runner")
    logs.flush()

    (event,) = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert (event["pid"], event["role"]) == (os.getpid(), "triggerer")  # the writer's
    assert (event["pid_field"], event["role_field"]) == (1, "runner")


def test_structlog_events_written_after_the_console_configured_it_reach_the_file(tmp_path):
    import structlog

    log_file = tmp_path / "scheduler.log"
    logs.configure("scheduler", level="INFO", log_file=log_file, console=True,
                   console_level="CRITICAL")  # fmt: skip
    logs.get_logger("spawnflow.test").critical("to the console too")  # configures structlog
    structlog.get_logger("user.code").info("through structlog", rows=3)
    logs.flush()

    events = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [(e["event"], e["logger"], e["role"]) for e in events] == [
        ("to the console too", "spawnflow.test", "scheduler"),
        ("through structlog", "user.code", "scheduler"),
    ]
    assert events[1]["rows"] == 3


STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def test_every_line_has_one_shape_whoever_writes_it(tmp_path):
    import structlog

    log_file = tmp_path / "scheduler.log"
    logs.configure("scheduler", level="INFO", log_file=log_file, console=False)
    logs.adopt_structlog()
    logs.get_logger("spawnflow.test").info("loop started", turn=1)
    logging.getLogger("alembic.runtime.migration").info("Running upgrade %s", "0001")
    structlog.get_logger("user.code").warning("through structlog", rows=3)
    logs.flush()

    events = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [list(e)[:6] for e in events] == [list(logs.LINE_KEYS)] * 3
    assert all(STAMP.fullmatch(e["timestamp"]) for e in events), events
    assert [(e["level"], e["logger"], e["event"]) for e in events] == [
        ("info", "spawnflow.test", "loop started"),
        ("info", "alembic.runtime.migration", "Running upgrade 0001"),
        ("warning", "user.code", "through structlog"),
    ]
    assert (events[0]["turn"], events[2]["rows"]) == (1, 3)


def test_fields_that_are_none_are_written_neither_to_the_file_nor_to_the_console(tmp_path, capsys):
    import structlog

    log_file = tmp_path / "task.log"
    logs.configure("task", level="INFO", log_file=log_file, console=True)
    logs.get_logger("spawnflow.test").warning("task finished", state="failed", reason=None)
    structlog.get_logger("user.code").warning("through structlog", rows=None)
    logs.flush()

    events = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert events[0]["state"] == "failed"
    assert not [key for event in events for key, value in event.items() if value is None]
    assert "reason" not in events[0]
    assert "rows" not in events[1]
    console = capsys.readouterr().err
    assert "state=failed" in console
    assert "None" not in console


def test_the_console_writes_the_files_json_lines_when_the_format_is_json(
    tmp_path, capsys, make_settings
):
    make_settings(**{"logging.format": "json"})  # read when a line is written
    log_file = tmp_path / "dag-processor.log"
    logs.configure("dag-processor", level="INFO", log_file=log_file, console=True)
    try:
        raise KeyError("missing")
    except KeyError:
        logs.get_logger("spawnflow.test").exception("pass failed", files=3)
    logs.flush()

    (in_file,) = [json.loads(line) for line in log_file.read_text().splitlines()]
    (on_console,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert on_console == in_file
    assert list(on_console) == [*logs.LINE_KEYS, "files", "exception"]


class _TerminalBuffer(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("console_format", ["auto", "text"])
def test_text_on_a_terminal_is_coloured_in_auto_and_never_in_text(monkeypatch, console_format):
    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal = _TerminalBuffer()
    monkeypatch.setattr(sys, "stderr", terminal)
    logs.configure("cli", console=True, console_format=console_format)
    logs.get_logger("spawnflow.test").warning("something to see", count=2)
    logs.flush()

    written = terminal.getvalue()
    assert "something to see" in written
    coloured = console_format == "auto" and logs.console_colors(terminal)
    assert ("\x1b[" in written) is coloured
    assert not written.lstrip().startswith("{")
