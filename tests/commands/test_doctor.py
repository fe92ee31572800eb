"""``spawnflow doctor`` end to end: the CLI as a subprocess, real children, real databases."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spawnflow.services import doctor

pytestmark = pytest.mark.process


def spawnflow(*args: str, home) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env["SPAWNFLOW_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "spawnflow", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_doctor_passes_every_check(start_method, database_url, home):
    done = spawnflow("--database-url", database_url, "doctor", "--method", start_method, home=home)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["check", start_method]
    assert lines[2].startswith("child ready")
    assert lines[2].endswith(" ms")
    for name in doctor.CHECKS:
        assert any(line.startswith(name) and line.split()[-1] == "ok" for line in lines), name
    assert lines[-1] == "All checks passed."
    assert done.stderr == ""


def test_doctor_fails_with_reasons_when_the_database_is_unreachable(start_method, home):
    url = "postgresql://postgres:secret@127.0.0.1:1/test"
    done = spawnflow("--database-url", url, "doctor", "--method", start_method, home=home)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"{start_method}: no inherited engine: cannot connect to the database" in done.stderr
    assert "secret" not in done.stdout + done.stderr
    assert "settings" in done.stdout
    assert "FAIL" in done.stdout


def test_doctor_checks_logging_at_whatever_level_the_files_keep(start_method, home):
    done = spawnflow("--log-level", "ERROR", "doctor", "--method", start_method, home=home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert any(line.split() == ["logging", "ok"] for line in done.stdout.splitlines())
