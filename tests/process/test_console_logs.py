"""What the components and the CLI write on the console, as real processes: text by
default, the log files' JSON lines with ``[logging] format = json``; the files are JSON
lines either way."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spawnflow.bootstrap import logs

pytestmark = pytest.mark.process

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def _spawnflow(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.pop("NO_COLOR", None)
    env.update(SPAWNFLOW_HOME=str(home), SPAWNFLOW__CORE__DAGS_FOLDER=str(home / "dags"))
    (home / "dags").mkdir(parents=True, exist_ok=True)  # a folder of ours: nothing said of it
    result = subprocess.run([sys.executable, "-m", "spawnflow", *args], env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


def _json_lines(text: str) -> list[dict]:
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert events, "no lines"
    assert {tuple(e)[:6] for e in events} == {logs.LINE_KEYS}
    assert all(STAMP.fullmatch(e["timestamp"]) for e in events)
    return events


def test_with_format_json_the_cli_and_a_component_write_json_lines_on_the_console(home):
    migrated = _spawnflow(home, "-v", "--set", "logging.format=json", "db", "migrate")
    cli = _json_lines(migrated.stderr)  # every line of stderr is a log line, in JSON
    assert {e["role"] for e in cli} == {"cli"}
    assert "Migrated" in migrated.stdout  # what the command says is not a log line

    parsed = _spawnflow(home, "--set", "logging.format=json", "dag-processor", "--once")
    component = _json_lines(parsed.stderr)
    assert ("dag-processor", "pass finished") in {(e["role"], e["event"]) for e in component}


def test_by_default_the_console_is_text_and_the_log_file_json_lines(home):
    _spawnflow(home, "db", "migrate")
    parsed = _spawnflow(home, "dag-processor", "--once")

    console = [line for line in parsed.stderr.splitlines() if "pass finished" in line]
    assert console, parsed.stderr
    assert not console[0].startswith("{")  # a person's line: time, level, event, fields
    events = _json_lines((home / "logs" / "dag-processor.log").read_text())
    assert "pass finished" in {e["event"] for e in events}
