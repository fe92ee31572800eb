"""Logging in one process: JSON lines with role and pid, stdlib records included."""

from __future__ import annotations

import json
import logging

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


def test_configure_replaces_the_previous_handlers(tmp_path):
    logs.configure("first", log_file=tmp_path / "first.log", console=False)
    logs.configure("second", log_file=tmp_path / "second.log", console=False)
    logs.get_logger().warning("only in second")
    for handler in logging.getLogger().handlers:
        handler.flush()
    assert len(logging.getLogger().handlers) == 1
    assert "only in second" in (tmp_path / "second.log").read_text()
    assert not (tmp_path / "first.log").exists()
    assert logs.current_role() == "second"
