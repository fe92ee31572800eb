"""``spawnflow dag-processor`` and ``spawnflow dags ...``: in process, and end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import spawnflow.example_dags
from spawnflow.bootstrap import platform as platforms
from tests.commands.test_cli import assert_user_error, run
from tests.oskit import press_ctrl_c, start_in_console
from tests.processors import dagfiles

pytestmark = pytest.mark.process

FORK_ONLY = """
import sys
from spawnflow import CommandTask, Dag
# Works only where the parser inherits the CLI's modules: the kind of module state
# that a Dag picks up under fork and loses under spawn (macOS, Windows, Python 3.14).
if "click" not in sys.modules:
    raise RuntimeError("this Dag needs something its parent process had loaded")
with Dag("fork_only"):
    CommandTask("t", "true")
"""


def folder(env: dict[str, str]) -> Path:
    return Path(env["SPAWNFLOW__CORE__DAGS_FOLDER"])


def test_dags_show_indents_the_tasks_of_each_task_group_under_it(project, start_method):
    project["SPAWNFLOW__CORE__MP_START_METHOD"] = start_method
    example = Path(spawnflow.example_dags.__file__).parent / "example_branching.py"
    dagfiles.write(folder(project), "example_branching.py", example.read_text())
    assert run("dag-processor", "--once", env=project).exit_code == 0

    shown = run("dags", "show", "example_branching", env=project).stdout.splitlines()

    tasks = [line.split()[0] if line.split() else "" for line in shown]
    start = tasks.index("choose_load")
    # Indented under its group, by its name in it; the upstream column has whole ids.
    assert [line.rstrip()[:12] for line in shown[start : start + 9]] == [
        "choose_load ", "full_load/", "  extract   ", "  extract__1", "  extract__2",
        "  merge     ", "incremental/", "  extract   ", "  merge     ",
    ]  # fmt: skip
    assert shown[start + 8].rstrip().endswith("incremental.extract")
    assert "none_failed_min_one_success" in shown[start + 9]


def test_a_missing_dags_folder_is_a_warning_naming_it(project, start_method):
    project["SPAWNFLOW__CORE__MP_START_METHOD"] = start_method
    folder(project).rmdir()
    once = run("dag-processor", "--once", env=project)
    assert once.exit_code == 0, once.output  # nothing to parse is not an error
    warning = [line for line in once.stderr.splitlines() if "the Dags folder" in line]
    assert len(warning) == 1, once.stderr
    assert "the Dags folder does not exist" in warning[0]
    assert str(folder(project)) in warning[0]


def test_once_then_list_show_report_and_import_errors(project, start_method):
    project["SPAWNFLOW__CORE__MP_START_METHOD"] = start_method
    dagfiles.write(folder(project), "good.py", dagfiles.good("good", tasks=2))
    hanging = dagfiles.write(folder(project), "hanging.py", dagfiles.HANG)

    once = run("dag-processor", "--once", env=project)
    assert once.exit_code == 0, once.output
    assert once.stdout.strip() == (
        "1 pass(es), 2 parse(s) of 2 file(s); now 1 Dag(s) and 1 import error(s)."
    )

    listed = run("dags", "list", env=project).stdout.splitlines()
    assert listed[0].split() == ["dag_id", "schedule", "paused", "active", "tags", "file"]
    assert listed[2].split()[:5] == ["good", "None", "(manual)", "no", "yes"]

    shown = run("dags", "show", "good", env=project).stdout
    assert "Schedule         None (manual)" in shown
    assert "t1    command  all_success   0        -" in shown

    errors = run("dags", "list-import-errors", env=project)
    assert errors.exit_code == 1
    assert f"{hanging} timed out after 2 seconds of parsing" in errors.stdout

    report = run("dags", "report", env=project).stdout.splitlines()
    assert report[0].split()[:4] == ["file", "seconds", "dags", "outcome"]
    assert [line.split()[0].endswith("hanging.py") for line in report[2:]] == [True, False]


def test_pause_and_unpause(project):
    dagfiles.write(folder(project), "good.py", dagfiles.good("good"))
    run("dag-processor", "--once", env=project)

    assert run("dags", "pause", "good", env=project).stdout == "Dag 'good' paused.\n"
    assert run("dags", "pause", "good", env=project).stdout == "Dag 'good' was already paused.\n"
    listed = run("dags", "list", env=project).stdout.splitlines()
    assert listed[2].split()[:4] == ["good", "None", "(manual)", "yes"]
    assert run("dags", "unpause", "good", env=project).stdout == "Dag 'good' unpaused.\n"
    assert_user_error(run("dags", "pause", "godo", env=project),
                      "There is no Dag 'godo'; did you mean 'good'?")  # fmt: skip
    assert_user_error(run("dags", "show", "nope", env=project), "There is no Dag 'nope'")


def test_dags_commands_need_a_migrated_database(tmp_path):
    env = {"SPAWNFLOW__DATABASE__URL": f"sqlite:///{tmp_path.as_posix()}/never.db"}
    for args in (["dags", "list"], ["dag-processor", "--once"]):
        assert_user_error(run(*args, env=env), "run `spawnflow db migrate`")


@pytest.mark.skipif("fork" not in platforms.current().start_methods, reason="no fork here")
def test_check_finds_a_dag_that_only_loads_under_fork(project, tmp_path):
    path = dagfiles.write(tmp_path, "fork_only.py", FORK_ONLY)
    methods = platforms.current().start_methods

    result = run("dags", "check", str(path), env=project)

    lines = result.stdout.splitlines()
    assert lines[0].split() == ["method", "loads", "dags", "tasks", "seconds"]
    verdicts = {line.split()[0]: line.split()[1] for line in lines[2:]}
    assert verdicts == {m: "ok" if m == "fork" else "FAIL" for m in methods}
    assert result.exit_code == 1
    others = ", ".join(m for m in methods if m != "fork")
    assert f"the file loads under some start methods but not under {others}" in result.stderr
    assert "this Dag needs something its parent process had loaded" in result.stderr


def test_check_agrees_for_a_portable_dag(project, tmp_path):
    path = dagfiles.write(tmp_path, "portable.py", dagfiles.good("portable", tasks=3))
    result = run("dags", "check", str(path), env=project)
    assert result.exit_code == 0, result.output
    methods = platforms.current().start_methods
    expected = (
        "Same result under every start method (parsed, and 3 task(s) ran)." if len(methods) > 1
        else f"Checked under {methods[0]} only (parsed, and 3 task(s) ran): no other start "
        "method to compare with."
    )  # Windows has spawn only  # fmt: skip
    assert result.stdout.splitlines()[-1] == expected


def test_a_warm_stop_of_the_dag_processor_leaves_no_child_behind(
    project, tmp_path, home, start_method
):
    project["SPAWNFLOW__CORE__MP_START_METHOD"] = start_method
    marker = tmp_path / "parsing"
    dagfiles.write(
        folder(project), "slow.py", f"open({str(marker)!r}, 'w').close()\n" + dagfiles.HANG
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.update(project, SPAWNFLOW_HOME=str(home), SPAWNFLOW__CORE__STOP_GRACE_PERIOD="2",
               SPAWNFLOW__DAG_PROCESSOR__FILE_PARSING_TIMEOUT="120")  # fmt: skip
    processor = start_in_console(
        [sys.executable, "-m", "spawnflow", "dag-processor"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert time.monotonic() < deadline, "the slow file was never parsed"
            assert processor.poll() is None, processor.communicate()
            time.sleep(0.05)
        family = psutil.Process(processor.pid).children(recursive=True)
        assert family, "no parser child while a file is parsing"

        press_ctrl_c(processor)  # a Windows console's reaches the parser children too
        _, err = processor.communicate(timeout=60)
    finally:
        if processor.poll() is None:
            processor.kill()
            processor.communicate()

    assert processor.returncode == 130, err  # as shells report a Ctrl-C
    assert "Traceback" not in err
    _, alive = psutil.wait_procs(family, timeout=30)
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []


def test_check_loads_helpers_from_the_dags_folder_and_flags_a_file_without_dags(project, tmp_path):
    dagfiles.write(folder(project), "common.py", "TAGS = ['shared']\n")
    uses_helper = dagfiles.write(
        tmp_path, "uses_helper.py", "from common import TAGS\n" + dagfiles.good("helped")
    )
    assert run("dags", "check", str(uses_helper), "--method", "spawn", env=project).exit_code == 0

    empty = dagfiles.write(tmp_path, "empty.py", "X = 1\n")
    result = run("dags", "check", str(empty), "--method", "spawn", env=project)
    assert result.exit_code == 1
    assert f"{empty} defines no Dag under any start method." in result.stderr


def test_the_default_dags_folder_is_made_by_the_first_dag_processor(home, tmp_path):
    env = {"SPAWNFLOW__CORE__LOAD_EXAMPLES": "false"}
    folder = home / "dags"
    assert (
        f"{folder} (not there yet: the first standalone or dag-processor makes it)"
        in run("info", env=env).output
    )
    assert run("db", "migrate", env=env).exit_code == 0

    made = run("dag-processor", "--once", env=env)

    assert made.exit_code == 0, made.output
    assert f"Made the Dags folder {folder}." in made.stderr
    assert folder.is_dir()
    assert "not there yet" not in run("info", env=env).output
    again = run("dag-processor", "--once", env=env)
    assert "Made the Dags folder" not in again.stderr

    # A folder the user named is never made: a typo would go unnoticed.
    typo = tmp_path / "dgas"
    named = run("dag-processor", "--once", env={**env, "SPAWNFLOW__CORE__DAGS_FOLDER": str(typo)})
    assert not typo.exists()
    assert "Made the Dags folder" not in named.stderr


def test_a_dag_whose_file_does_not_import_is_reported_as_such(project):
    source = 'from spawnflow import Dag\nimport no_such_module_x\nwith Dag("nightly"):\n    pass\n'
    dagfiles.write(folder(project), "nightly.py", source)
    run("dag-processor", "--once", env=project)

    for command in (["dags", "show", "nightly"], ["dags", "test", "nightly"],
                    ["dags", "pause", "nightly"]):  # fmt: skip
        assert_user_error(
            run(*command, env=project),
            f"There is no Dag 'nightly': {folder(project) / 'nightly.py'}, which may define it, "
            "does not import (ModuleNotFoundError: No module named 'no_such_module_x'); see "
            "`spawnflow dags list-import-errors`",
        )  # fmt: skip
