"""Folder names built from ids: one id, one folder, on every OS's file system."""

from __future__ import annotations

from pathlib import PureWindowsPath

import pytest

from spawnflow.bootstrap.paths import folder_name
from spawnflow.processors.scheduler.queueing import attempt_log


def test_a_plain_lowercase_id_names_its_folder_as_it_is():
    assert folder_name("dag_id", "example_etl") == "dag_id=example_etl"
    assert folder_name("task_id", "load.v2-final") == "task_id=load.v2-final"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("ETL", "etl"),  # the same folder on a case-insensitive file system (macOS, Windows)
        ("etl.", "etl"),  # Windows drops a trailing dot
        ("a:b", "a_b"),  # ':' cannot be in a Windows file name
        ("x" * 40 + "1", "x" * 40 + "2"),  # cut to the same start
    ],
)
def test_ids_that_would_share_a_folder_get_folders_of_their_own(one, other):
    names = {folder_name("dag_id", one).lower(), folder_name("dag_id", other).lower()}
    assert len(names) == 2
    for name in names:
        assert not name.endswith(".")
        assert ":" not in name


def test_an_attempt_log_of_the_longest_ids_fits_windows_path_limit(make_settings, tmp_path):
    # 250-character ids and a 60-character base folder such as
    # C:\Users\someone\AppData\Local\spawnflow\Logs: still under MAX_PATH (260).
    settings = make_settings(**{"logging.base_log_folder": str(tmp_path / "logs")})
    longest = "a" * 250
    path = attempt_log(settings, longest, "manual__" + longest, longest, 99)
    relative = path.relative_to(settings.logging.base_log_folder)
    windows = PureWindowsPath("C:/Users/someone/AppData/Local/spawnflow/Logs", *relative.parts)
    assert len(str(windows)) < 260, windows
