"""Try logs copied to ``[logging] remote_base_url`` (a ``file://`` URL: ``memory://``
lives in one process) by the supervisor once the try's state is written, under each
start method, and read back when the local file is missing. The scheduler runs in the
test process; workers and tasks are children."""

from __future__ import annotations

from pathlib import Path

import pytest

from spawnflow.bootstrap import logs, remote_logs
from spawnflow.processors.scheduler.queueing import attempt_log, attempt_log_key
from spawnflow.services import listings
from spawnflow.services import runs as run_service
from tests.scheduler import harness
from tests.scheduler.test_runs import _scheduling, run_dag

TASKS = ("before", "gate", "after")


def _site(start_method, make_settings, tmp_path, remote: str):
    url = f"sqlite:///{tmp_path.as_posix()}/s.db"
    settings, marks = _scheduling(start_method, make_settings, tmp_path, url,
                                  **{"logging.remote_base_url": remote})  # fmt: skip
    marks.mkdir(exist_ok=True)
    (marks / "open").touch()
    return settings


def _run_id_of(run_pk: int) -> str:
    return next(r.run_id for r in listings.list_runs() if r.id == run_pk)


@pytest.mark.process
def test_each_tries_log_is_copied_and_read_back_when_the_local_file_is_gone(
    start_method, make_settings, tmp_path
):
    remote = tmp_path / "remote"
    settings = _site(start_method, make_settings, tmp_path, remote.as_uri())

    run_pk = run_dag(settings, "gated")

    assert harness.run_state(run_pk) == "success"
    run_id = _run_id_of(run_pk)
    for task_id in TASKS:
        local = attempt_log(settings, "gated", run_id, task_id, 1)
        copy = remote.joinpath(*attempt_log_key("gated", run_id, task_id, 1).split("/"))
        # The copy is made after the try's state is written: it holds the whole log.
        assert copy.read_bytes() == local.read_bytes()
        assert "task finished" in copy.read_text(encoding="utf-8")
    local = attempt_log(settings, "gated", run_id, "gate", 1)
    expected = run_service.read_log(local)[0]
    local.unlink()
    url, lines = run_service.read_remote_log(settings, local)
    assert url == f"{remote.as_uri()}/{attempt_log_key('gated', run_id, 'gate', 1)}"
    assert lines == expected


@pytest.mark.process
def test_a_copy_that_fails_is_logged_and_leaves_the_tries_outcome_alone(
    start_method, make_settings, tmp_path
):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the remote folder should be")
    settings = _site(start_method, make_settings, tmp_path, (blocker / "logs").as_uri())

    run_pk = run_dag(settings, "gated")

    assert harness.run_state(run_pk) == "success"
    tis = harness.task_instances(run_pk)
    assert {t: (tis[t].state, tis[t].try_number) for t in TASKS} == {
        t: ("success", 1) for t in TASKS
    }
    worker_log = logs.role_log_file(settings.logging.base_log_folder, "executor-worker")
    assert worker_log.read_text().count("could not copy the try's log to remote storage") == 3


def test_a_relative_log_file_lives_under_this_machines_logs_folder(make_settings, tmp_path):
    settings = make_settings(**{"logging.base_log_folder": str(tmp_path / "here")})
    key = attempt_log_key("d", "r", "t", 2)

    assert remote_logs.local_path(settings, key) == tmp_path.joinpath(
        "here", "dag_id=d", "run_id=r", "task_id=t", "attempt=2.log"
    )
    elsewhere = tmp_path / "elsewhere" / "attempt=1.log"
    assert remote_logs.local_path(settings, str(elsewhere)) == elsewhere
    assert remote_logs.key_of(remote_logs.local_path(settings, key)) == key


def test_no_remote_copy_is_read_when_remote_logs_are_off(make_settings, tmp_path):
    settings = make_settings(**{"logging.remote_base_url": ""})
    assert run_service.read_remote_log(settings, Path(tmp_path / "attempt=1.log")) is None


def test_a_missing_remote_copy_reads_as_none(make_settings, tmp_path):
    settings = make_settings(**{"logging.remote_base_url": (tmp_path / "empty").as_uri()})
    key = attempt_log_key("d", "r", "t", 1)
    assert run_service.read_remote_log(settings, tmp_path.joinpath(*key.split("/"))) is None
