"""Parsers that parse several Dag files in turn, under each start method: what one file
sets is never seen by the next, a file that leaves something behind is its parser's
last, and a file that hangs or ends its parser harms only itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.oskit import POSIX
from tests.processors import dagfiles
from tests.processors.test_dag_processor import (
    import_errors,
    run_once,
    settings_factory,
    stored_dags,
)

pytestmark = pytest.mark.process

#: Reports, as its Dag's description, the parser's pid and what it can see.
REPORTS = """
import colorsys, json, os, sys, warnings
import counter_helper
from spawnflow import CommandTask, Dag
counter_helper.count += 1
seen = {{
    "pid": os.getpid(), "environ": os.environ.get("SPAWNFLOW_TEST_LEAK"),
    "path": "/spawnflow-test-leak" in sys.path, "cwd": os.getcwd(),
    "count": counter_helper.count, "filters": len(warnings.filters),
    "patched": [warnings.formatwarning.__module__, colorsys.rgb_to_hsv.__module__],
}}
with Dag("{dag_id}", description=json.dumps(seen)):
    CommandTask("t", "exit 0")
"""

#: Changes what can be put back, then reports.
SETS_STATE = (
    """
import os, sys, warnings
os.environ["SPAWNFLOW_TEST_LEAK"] = "1"
sys.path.append("/spawnflow-test-leak")
os.chdir({elsewhere!r})
warnings.simplefilter("ignore")
"""
    + REPORTS
)

#: Leaves behind what cannot be put back: the parser must leave after it.
LEFT_BEHIND = {
    "thread": ("import threading, time\n"
               "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n",
               "it left thread"),
    # warnings is imported before any Dag file, colorsys by this file first.
    "monkeypatch, a module imported before": (
        "import warnings\nwarnings.formatwarning = lambda *args: 'patched'\n",
        "it rebound warnings.formatwarning"),
    "monkeypatch, a module it imports first": (
        "import colorsys\ncolorsys.rgb_to_hsv = lambda *args: 'patched'\n",
        "it rebound colorsys.rgb_to_hsv"),
    "signal handler": ("import signal\nsignal.signal(signal.SIGINT, lambda *args: None)\n",
                       "it changed the handler of SIGINT"),
    "logging handler": ("import logging\nlogging.getLogger().addHandler(logging.NullHandler())\n",
                        "it changed the handlers or level of logger 'root'"),
    "process": ("import subprocess, sys\n"
                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n",
                "it started process"),
}  # fmt: skip


@pytest.fixture
def dags_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / ".spawnflowignore").write_text("counter_helper.py\n")
    (folder / "counter_helper.py").write_text("count = 0\n")
    return folder


@pytest.fixture
def batch_settings(make_settings, dags_folder, tmp_path, start_method):
    """One parser at a time, so that files go through the same one in name order."""
    url = f"sqlite:///{tmp_path.as_posix()}/p.db"
    make = settings_factory(make_settings, dags_folder, url, start_method)
    return lambda **extra: make(**{"dag_processor.parsing_processes": "1", **extra})


def seen() -> dict[str, dict]:
    return {dag_id: json.loads(dag.description) for dag_id, dag in stored_dags().items()}


def test_what_one_file_sets_is_never_seen_by_the_next(batch_settings, dags_folder, tmp_path):
    settings = batch_settings(**{"dag_processor.parser_max_files": "10"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dagfiles.write(dags_folder, "a_sets.py", SETS_STATE.format(elsewhere=str(elsewhere),
                                                              dag_id="sets"))  # fmt: skip
    dagfiles.write(dags_folder, "b_reads.py", REPORTS.format(dag_id="reads"))

    summary = run_once(settings)

    assert (summary.errors, summary.parsers, summary.recycled) == ({}, 1, [])
    sets, reads = seen()["sets"], seen()["reads"]
    assert sets["pid"] == reads["pid"]  # one parser parsed both
    assert (sets["environ"], sets["path"], sets["cwd"]) == ("1", True, str(elsewhere))
    assert reads["environ"] is None
    assert reads["path"] is False
    assert reads["cwd"] != str(elsewhere)
    assert reads["filters"] == sets["filters"] - 1  # the filter a_sets.py added is gone
    # The Dags folder's helper is imported afresh, as in a process of its own.
    assert (sets["count"], reads["count"]) == (1, 1)


@pytest.mark.parametrize("what", sorted(LEFT_BEHIND))
def test_a_file_that_leaves_something_behind_is_its_parsers_last(what, batch_settings, dags_folder):
    if what == "process" and not POSIX:
        pytest.skip("a process of a Windows parser is killed with it, not after the file")
    settings = batch_settings(**{"dag_processor.parser_max_files": "10"})
    leaves, why = LEFT_BEHIND[what]
    dagfiles.write(dags_folder, "a_leaves.py", leaves + REPORTS.format(dag_id="leaves"))
    dagfiles.write(dags_folder, "b_next.py", REPORTS.format(dag_id="next"))

    summary = run_once(settings)

    assert summary.errors == {}
    assert summary.parsers == 2
    [recycled] = summary.recycled
    assert recycled.startswith(f"{dags_folder.resolve() / 'a_leaves.py'}: {why}"), recycled
    found = seen()
    assert found["leaves"]["pid"] != found["next"]["pid"]
    assert found["next"]["patched"] == ["warnings", "colorsys"]


def test_a_hanging_or_exiting_file_harms_only_itself(batch_settings, dags_folder):
    settings = batch_settings(**{"dag_processor.parser_max_files": "10",
                                 "dag_processor.file_parsing_timeout": "2"})  # fmt: skip
    dagfiles.write(dags_folder, "a_good.py", REPORTS.format(dag_id="first"))
    hanging = dagfiles.write(dags_folder, "b_hangs.py", dagfiles.HANG)
    dagfiles.write(dags_folder, "c_exits.py", dagfiles.OS_EXIT)
    dagfiles.write(dags_folder, "d_good.py", REPORTS.format(dag_id="last"))

    summary = run_once(settings)

    errors = import_errors()
    assert errors.pop("b_hangs.py") == f"{hanging.resolve()} timed out after 2 seconds of parsing"
    assert "exited with code 7" in errors.pop("c_exits.py")
    assert errors == {}
    assert set(stored_dags()) == {"first", "last"}
    # The first parser took a_good.py and hung on b_hangs.py; the second ended on
    # c_exits.py; a third parsed d_good.py.
    assert summary.parsers == 3


@pytest.mark.parametrize(("max_files", "parsers"), [(1, 5), (2, 3), (5, 1)])
def test_a_parser_parses_at_most_parser_max_files(max_files, parsers, batch_settings, dags_folder):
    settings = batch_settings(**{"dag_processor.parser_max_files": str(max_files)})
    for n in range(5):
        dagfiles.write(dags_folder, f"file_{n}.py", REPORTS.format(dag_id=f"d{n}"))

    summary = run_once(settings)

    assert (summary.errors, summary.parsers, summary.recycled) == ({}, parsers, [])
    pids = [seen()[f"d{n}"]["pid"] for n in range(5)]
    # Each file's parser began with the first file of its batch.
    assert [pids.index(pid) for pid in pids] == [n - n % max_files for n in range(5)]
