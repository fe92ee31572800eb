"""A role's log file rotates at [logging] max_file_size and keeps [logging] backup_count old
files, with one writer or several; a try's log never rotates; a rotation that fails costs
no line; a size spawnflow cannot read is one sentence."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spawnflow.bootstrap import logs
from spawnflow.bootstrap.launcher import ChildSpec, launch
from spawnflow.bootstrap.logfiles import LogFileHandler
from spawnflow.bootstrap.logrotation import RotatingLogFileHandler

MAX = 2048


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


def _numbers(path: Path) -> list[int]:
    return [json.loads(line)["number"] for line in path.read_text().splitlines()]


def _write(count: int) -> None:
    log = logs.get_logger("tests.writer")
    for number in range(count):
        log.info("numbered line", number=number, padding="x" * 100)
    logs.flush()


def test_a_roles_file_rotates_at_the_size_and_keeps_backup_count_files(make_settings):
    snapshot = make_settings(**{"logging.max_file_size": "2KiB", "logging.backup_count": "2"})
    log_file = logs.role_log_file(snapshot.logging.base_log_folder, "scheduler")
    logs.configure("scheduler", log_file=log_file, console=False)
    _write(200)

    folder = log_file.parent
    assert sorted(p.name for p in folder.iterdir()) == [
        "scheduler.log", "scheduler.log.1", "scheduler.log.2",
    ]  # fmt: skip
    line = len(log_file.read_text().splitlines()[0]) + 1
    for backup in ("scheduler.log.1", "scheduler.log.2"):
        # Rotated once it reached the size: at most one line past it.
        assert MAX <= (folder / backup).stat().st_size < MAX + line + 16, backup
    # The newest lines, in order, nothing lost in what is kept.
    kept = [*_numbers(folder / "scheduler.log.2"), *_numbers(folder / "scheduler.log.1"),
            *_numbers(log_file)]  # fmt: skip
    assert kept == list(range(200 - len(kept), 200))


def test_a_tries_log_is_never_rotated(make_settings, tmp_path):
    make_settings(**{"logging.max_file_size": "2KiB", "logging.backup_count": "2"})
    attempt = tmp_path / "dag_id=d" / "run_id=r" / "task_id=t" / "attempt=1.log"
    logs.configure("task", log_file=attempt, console=False)
    _write(200)

    assert [type(h) for h in logging.getLogger().handlers] == [LogFileHandler]
    assert [p.name for p in attempt.parent.iterdir()] == ["attempt=1.log"]
    assert _numbers(attempt) == list(range(200))


def test_a_size_of_zero_never_rotates(make_settings):
    snapshot = make_settings(**{"logging.max_file_size": "0"})
    log_file = logs.role_log_file(snapshot.logging.base_log_folder, "scheduler")
    logs.configure("scheduler", log_file=log_file, console=False)
    _write(100)

    assert [p.name for p in log_file.parent.iterdir()] == ["scheduler.log"]


def test_a_rotation_that_fails_is_said_once_and_costs_no_line(make_settings, capsys):
    snapshot = make_settings(**{"logging.max_file_size": "2KiB"})
    log_file = logs.role_log_file(snapshot.logging.base_log_folder, "executor-worker")
    logs.configure("executor-worker", log_file=log_file, console=False)
    (handler,) = logging.getLogger().handlers
    assert isinstance(handler, RotatingLogFileHandler)

    def held_open(source, dest) -> None:  # what Windows does to a file another process holds
        raise PermissionError(13, "Permission denied", source)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "rename", held_open)
        _write(100)

    assert _numbers(log_file) == list(range(100))
    said = [line for line in capsys.readouterr().err.splitlines() if "rotate" in line]
    assert said == [
        f"spawnflow: cannot rotate the log file {log_file} (Permission denied; another "
        "process may hold it open); it grows until it can be rotated"
    ]


def test_a_lock_left_by_a_writer_that_died_while_rotating_is_taken_over(make_settings):
    snapshot = make_settings(**{"logging.max_file_size": "2KiB", "logging.backup_count": "2"})
    log_file = logs.role_log_file(snapshot.logging.base_log_folder, "scheduler")
    logs.configure("scheduler", log_file=log_file, console=False)
    lock = Path(f"{log_file}.lock")
    lock.touch()
    an_hour_ago = lock.stat().st_mtime - 3600
    os.utime(lock, (an_hour_ago, an_hour_ago))
    _write(200)

    assert sorted(p.name for p in log_file.parent.iterdir()) == [
        "scheduler.log", "scheduler.log.1", "scheduler.log.2",
    ]  # fmt: skip


@pytest.mark.process
def test_writers_sharing_a_roles_file_rotate_it_without_losing_or_repeating_a_line(
    start_method, make_settings, tmp_path
):
    snapshot = make_settings(**{"logging.max_file_size": "4KiB", "logging.backup_count": "1000"})
    gate, count = tmp_path / "gate", 300
    children = [
        launch(ChildSpec("test-writer", "tests.fixtures.targets:log_numbered_lines",
                         {"count": count, "gate": str(gate)}), method=start_method)
        for _ in range(3)
    ]  # fmt: skip
    for child in children:
        child.wait_ready()
    gate.touch()  # all at once
    for child in children:
        status = child.join(timeout=120)
        assert status is not None, "a writer did not finish"
        assert status.exitcode == 0, status.describe()

    log_file = logs.role_log_file(snapshot.logging.base_log_folder, "test-writer")
    files = sorted(log_file.parent.glob("test-writer.log*"))
    written: dict[int, list[int]] = {child.pid: [] for child in children}
    for path in files:
        for line in path.read_text().splitlines():
            event = json.loads(line)
            written[event["pid"]].append(event["number"])
    lost = {pid: sorted(set(range(count)) - set(numbers)) for pid, numbers in written.items()}
    repeated = {pid: len(numbers) - len(set(numbers)) for pid, numbers in written.items()}
    assert (lost, repeated) == ({c.pid: [] for c in children}, {c.pid: 0 for c in children}), [
        (p.name, p.stat().st_size) for p in files
    ]
    if sys.platform != "win32":  # Windows cannot rename a file another writer holds open
        assert len(files) > 3, [p.name for p in files]


@pytest.mark.parametrize("size", ["10XB", "-1", "1.5"])
def test_a_size_spawnflow_cannot_read_is_one_sentence(home, size):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.update(SPAWNFLOW_HOME=str(home), SPAWNFLOW__LOGGING__MAX_FILE_SIZE=size)
    result = subprocess.run([sys.executable, "-m", "spawnflow", "config", "show"], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip

    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        f"Error: [logging] max_file_size is {size!r} from environment variable "
        "SPAWNFLOW__LOGGING__MAX_FILE_SIZE, but it must be a size in bytes, or with a unit: "
        "10MB, 512KiB, 50 MiB (KB, MB and GB are powers of 1000, KiB, MiB and GiB of 1024)."
    ]


@pytest.mark.parametrize(("size", "size_in_bytes"), [
    ("1048576", 1048576), ("10MB", 10_000_000), ("512KiB", 524288), ("50 MiB", 52428800),
    ("1.5 GiB", 1610612736), ("2kb", 2000), ("0", 0), ("100 B", 100),
])  # fmt: skip
def test_sizes_are_read_in_bytes_or_with_a_unit(make_settings, size, size_in_bytes):
    assert make_settings(**{"logging.max_file_size": size}).logging.max_file_size == size_in_bytes
