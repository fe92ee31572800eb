"""The Dag processor under each start method: what it stores, and what it survives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from spawnflow.bootstrap import logs, orm
from spawnflow.models.dag import DagFileModel, DagModel, ImportErrorModel, SerializedDagModel
from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
from spawnflow.sdk import serialize
from tests.oskit import KILLED, POSIX, SEGFAULT
from tests.processors import dagfiles

pytestmark = pytest.mark.process


@pytest.fixture
def dags_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    return folder


def settings_factory(make_settings, dags_folder: Path, url: str, method: str):
    """``make(**extra)``: settings for a processor over ``dags_folder``, on a fresh ``url``,
    parsing under ``method``."""
    from spawnflow.models import schema

    def make(**extra):
        values = {
            "database.url": url,
            "core.dags_folder": str(dags_folder),
            "core.load_examples": "false",
            "dag_processor.parsing_processes": "2",
            "dag_processor.file_parsing_timeout": "20",
            "dag_processor.mp_start_method": method,
            **extra,
        }
        return make_settings(**values)

    make()
    schema.reset(url)
    return make


@pytest.fixture
def processor_settings(make_settings, dags_folder, database_url, start_method):
    """On each database backend: where what the processor stores matters."""
    return settings_factory(make_settings, dags_folder, database_url, start_method)


@pytest.fixture
def sqlite_processor_settings(make_settings, dags_folder, tmp_path, start_method):
    """On SQLite only: for what a Dag file does to its parser, which no database changes."""
    url = f"sqlite:///{tmp_path.as_posix()}/p.db"
    return settings_factory(make_settings, dags_folder, url, start_method)


def run_once(settings):
    return DagFileProcessorManager(settings).run(once=True)[0]


def import_errors() -> dict[str, str]:
    with orm.session_scope() as session:
        rows = session.scalars(select(ImportErrorModel))
        return {Path(row.fileloc).name: row.error for row in rows}


def stored_dags() -> dict[str, DagModel]:
    with orm.session_scope() as session:
        return {row.dag_id: row for row in session.scalars(select(DagModel))}


def serialized(dag_id: str) -> tuple[serialize.SerializedDag, SerializedDagModel]:
    with orm.session_scope() as session:
        row = session.get(SerializedDagModel, dag_id)
        return serialize.decode(row.data).dag, row


# -- on every database ----------------------------------------------------------------


def test_one_pass_stores_dags_errors_and_stats(start_method, processor_settings, dags_folder):
    settings = processor_settings()
    dagfiles.write(dags_folder, "good.py", dagfiles.good("good", tasks=3))
    dagfiles.write(dags_folder, "nested/other.py", dagfiles.good("other"))
    dagfiles.write(dags_folder, "broken.py", dagfiles.SYNTAX_ERROR)
    dagfiles.write(dags_folder, "helpers/ignored.py", "raise RuntimeError('never imported')")
    dagfiles.write(dags_folder, ".spawnflowignore", "helpers/\n")

    summary = run_once(settings)

    assert (summary.files, summary.parsed, summary.dags) == (3, 3, 2)
    assert set(stored_dags()) == {"good", "other"}
    document, _ = serialized("good")
    assert [t.task_id for t in document.tasks] == ["t0", "t1", "t2"]
    assert document.fileloc == str(dags_folder / "good.py")
    errors = import_errors()
    assert set(errors) == {"broken.py"}
    assert "SyntaxError" in errors["broken.py"]
    with orm.session_scope() as session:
        stats = {Path(r.fileloc).name: r for r in session.scalars(select(DagFileModel))}
    assert {name: (s.outcome, s.dag_count) for name, s in stats.items()} == {
        "good.py": ("ok", 1), "other.py": ("ok", 1), "broken.py": ("import error", 0),
    }  # fmt: skip


def test_changed_files_are_parsed_again_and_unchanged_dags_are_not_rewritten(
    start_method, processor_settings, dags_folder
):
    settings = processor_settings(**{"dag_processor.refresh_interval": "0"})
    changing = dagfiles.write(dags_folder, "changing.py", dagfiles.good("changing", tasks=1))
    dagfiles.write(dags_folder, "steady.py", dagfiles.good("steady"))
    manager = DagFileProcessorManager(settings)
    manager.run_pass()
    _, steady_before = serialized("steady")

    changing.write_text(dagfiles.good("changing", tasks=2))
    manager.run_pass()

    document, _ = serialized("changing")
    assert [t.task_id for t in document.tasks] == ["t0", "t1"]
    _, steady_after = serialized("steady")
    assert steady_after.last_updated == steady_before.last_updated  # parsed, not rewritten
    assert steady_after.dag_hash == steady_before.dag_hash


def test_a_deleted_file_or_dropped_dag_makes_its_dags_inactive(
    start_method, processor_settings, dags_folder
):
    settings = processor_settings(**{"dag_processor.refresh_interval": "0"})
    doomed = dagfiles.write(dags_folder, "doomed.py", dagfiles.good("doomed"))
    two = dagfiles.write(dags_folder, "two.py", dagfiles.good("first") + dagfiles.good("second"))
    manager = DagFileProcessorManager(settings)
    manager.run_pass()
    assert {d for d, m in stored_dags().items() if m.is_active} == {"doomed", "first", "second"}

    doomed.unlink()
    two.write_text(dagfiles.good("first"))
    summary = manager.run_pass()

    assert summary.forgotten == [str(doomed)]
    assert {d: m.is_active for d, m in stored_dags().items()} == {
        "doomed": False, "first": True, "second": False,
    }  # fmt: skip
    with orm.session_scope() as session:
        assert {Path(r.fileloc).name for r in session.scalars(select(DagFileModel))} == {"two.py"}


def test_a_dags_folder_that_vanishes_keeps_its_dags_and_says_so(
    start_method, processor_settings, dags_folder, caplog
):
    """An unmounted volume or a folder moved away is not every Dag deleted."""
    settings = processor_settings(**{"dag_processor.refresh_interval": "0"})
    dagfiles.write(dags_folder, "kept.py", dagfiles.good("kept"))
    manager = DagFileProcessorManager(settings)
    manager.run_pass()
    moved = dags_folder.rename(dags_folder.with_name("moved-away"))

    with caplog.at_level("WARNING"):
        manager.run_pass()
        manager.run_pass()  # said once, not on every pass
    warnings = [logs.event_of(r) for r in caplog.records if r.name.startswith("spawnflow")]
    assert [w["event"] for w in warnings] == [
        "the Dags folder does not exist; no Dags are read from it, and those stored from it "
        "stay as they are"
    ]
    assert warnings[0]["dags_folder"] == str(dags_folder)
    assert {d: m.is_active for d, m in stored_dags().items()} == {"kept": True}

    caplog.clear()
    moved.rename(dags_folder)
    with caplog.at_level("WARNING"):
        manager.run_pass()
    assert [r.getMessage() for r in caplog.records if r.name.startswith("spawnflow")] == [
        "the Dags folder is back"
    ]
    assert {d: m.is_active for d, m in stored_dags().items()} == {"kept": True}


def test_a_dag_id_defined_by_two_files_is_an_error_naming_both(
    start_method, processor_settings, dags_folder
):
    settings = processor_settings(**{"dag_processor.refresh_interval": "0"})
    paths = [
        dagfiles.write(dags_folder, "a_first.py", dagfiles.good("shared")),
        dagfiles.write(dags_folder, "b_second.py", dagfiles.good("shared")),
    ]
    manager = DagFileProcessorManager(settings)
    manager.run_pass()

    # The file whose result was stored first owns the id (files parse in parallel).
    owner = Path(stored_dags()["shared"].fileloc)
    (other,) = [p for p in paths if p != owner]
    expected = {other.name: f"Dag 'shared' in {other} is already defined in {owner}"}
    assert import_errors() == expected
    manager.run_pass()  # and keeps it
    assert Path(stored_dags()["shared"].fileloc) == owner
    assert import_errors() == expected


def test_a_file_that_connects_to_the_database_at_import_disturbs_nothing(
    start_method, processor_settings, dags_folder, database_url
):
    settings = processor_settings()
    dagfiles.write(dags_folder, "connected.py", dagfiles.connects_to(database_url))
    dagfiles.write(dags_folder, "plain.py", dagfiles.good("plain"))
    with orm.session_scope() as session:  # the manager's pool holds a connection already
        held = orm.server_connection_id(session.connection())

    summary = run_once(settings)

    assert summary.errors == {}
    assert set(stored_dags()) == {"connected", "plain"}
    with orm.session_scope() as session:
        assert orm.server_connection_id(session.connection()) == held


# -- what a Dag file can do to its parser (SQLite: the database does not matter here) ----


CRASHES = [
    ("os_exit.py", dagfiles.OS_EXIT, "exited with code 7 before it reported its Dags"),
    ("killed.py", dagfiles.KILLED, f"{KILLED} before it reported its Dags"),
    ("segfault.py", dagfiles.SEGFAULT, f"{SEGFAULT} before it reported its Dags"),
    ("sys_exit.py", dagfiles.SYS_EXIT, "called sys.exit(3) while being imported"),
    ("missing.py", dagfiles.MISSING_MODULE, "No module named 'no_such_module_for_spawnflow'"),
]


def test_crashes_are_import_errors_and_the_manager_carries_on(
    start_method, sqlite_processor_settings, dags_folder
):
    settings = sqlite_processor_settings()
    for name, text, _ in CRASHES:
        dagfiles.write(dags_folder, name, text)
    dagfiles.write(dags_folder, "survivor.py", dagfiles.good("survivor"))

    summary = run_once(settings)

    errors = import_errors()
    for name, _, expected in CRASHES:
        assert expected in errors[name], errors[name]
    assert (summary.parsed, set(stored_dags())) == (len(CRASHES) + 1, {"survivor"})
    if start_method != "fork":  # our own frames are left out of a Dag file's traceback
        assert "spawnflow/processors" not in errors["missing.py"]


def test_a_hanging_file_is_stopped_and_the_timeout_recorded(
    start_method, sqlite_processor_settings, dags_folder
):
    settings = sqlite_processor_settings(**{"dag_processor.file_parsing_timeout": "1"})
    hanging = dagfiles.write(dags_folder, "hanging.py", dagfiles.HANG)
    dagfiles.write(dags_folder, "quick.py", dagfiles.good("quick"))

    run_once(settings)

    assert import_errors() == {"hanging.py": f"{hanging} timed out after 1 seconds of parsing"}
    assert set(stored_dags()) == {"quick"}


def test_threads_and_forks_at_import_do_not_hold_up_the_manager(
    start_method, sqlite_processor_settings, dags_folder
):
    settings = sqlite_processor_settings(**{"dag_processor.file_parsing_timeout": "60"})
    dagfiles.write(dags_folder, "threaded.py", dagfiles.THREAD_AT_IMPORT)
    if POSIX:
        dagfiles.write(dags_folder, "forked.py", dagfiles.FORK_AT_IMPORT)

    summary = run_once(settings)

    assert summary.errors == {}
    assert set(stored_dags()) == ({"threaded", "forked"} if POSIX else {"threaded"})
    # Had the manager waited for the 600 s thread, the pass would not have ended.


def test_once_parses_each_file_exactly_once(start_method, sqlite_processor_settings, dags_folder):
    settings = sqlite_processor_settings()
    counters = []
    for n in range(5):
        path = dagfiles.write(
            dags_folder, f"counted_{n}.py", dagfiles.COUNTS_IMPORTS.format(dag_id=f"c{n}")
        )
        counters.append(Path(f"{path}.count"))

    run_once(settings)

    assert [c.read_text().splitlines() for c in counters] == [["imported"]] * 5


def test_the_parser_imports_no_sqlalchemy(start_method, sqlite_processor_settings, dags_folder):
    import sys

    settings = sqlite_processor_settings()
    dagfiles.write(dags_folder, "modules.py", dagfiles.REPORTS_SQLALCHEMY)

    run_once(settings)

    loaded = stored_dags()["modules"].description
    if start_method == "fork":
        # A fork child is a copy of the manager, which holds the engine: it has what
        # the manager had, and imported no more of it.
        ours = sorted(name for name in sys.modules if name.split(".")[0] == "sqlalchemy")
        assert loaded.split(",") == ours
    else:
        assert loaded == "none"


def test_tags_and_schedules_are_stored_for_listing(
    start_method, sqlite_processor_settings, dags_folder
):
    settings = sqlite_processor_settings(**{"core.load_examples": "true"})

    run_once(settings)

    dags = stored_dags()
    assert {d: (m.schedule, json.loads(m.tags)) for d, m in dags.items()} == {
        "example_etl": ("@daily", ["example"]),
        "example_command": ("0 6 * * 1-5", ["example"]),
        "example_fan_out_in": ("6:00:00", ["example"]),
        "example_branching": ("@daily", ["example"]),
        "example_mapping": ("@daily", ["example"]),
    }


def test_new_dags_can_start_paused(start_method, sqlite_processor_settings, dags_folder):
    settings = sqlite_processor_settings(**{"core.dags_are_paused_at_creation": "true"})
    dagfiles.write(dags_folder, "fresh.py", dagfiles.good("fresh"))
    run_once(settings)
    assert stored_dags()["fresh"].is_paused is True


def test_two_dags_with_one_id_in_one_file_is_an_import_error(
    start_method, sqlite_processor_settings, dags_folder
):
    settings = sqlite_processor_settings()
    twice = dagfiles.write(dags_folder, "twice.py", dagfiles.good("same") + dagfiles.good("same"))
    run_once(settings)
    assert import_errors() == {"twice.py": f"{twice}: Dag 'same' is defined twice in this file"}
    assert stored_dags() == {}


def test_num_runs_makes_that_many_passes(start_method, sqlite_processor_settings, dags_folder):
    settings = sqlite_processor_settings(
        **{"dag_processor.refresh_interval": "0", "dag_processor.poll_interval": "0.1"}
    )
    counted = dagfiles.write(dags_folder, "counted.py", dagfiles.COUNTS_IMPORTS.format(dag_id="c"))

    summaries = DagFileProcessorManager(settings).run(num_runs=3)

    assert len(summaries) == 3
    assert Path(f"{counted}.count").read_text().splitlines() == ["imported"] * 3


def test_dag_ids_that_differ_only_in_case_are_two_dags(
    start_method, processor_settings, dags_folder
):
    settings = processor_settings()
    dagfiles.write(dags_folder, "cases.py", dagfiles.good("Sales") + dagfiles.good("sales", 2))
    run_once(settings)
    assert set(stored_dags()) == {"Sales", "sales"}
    assert [t.task_id for t in serialized("sales")[0].tasks] == ["t0", "t1"]


def test_a_helper_named_like_a_standard_module_breaks_nothing(
    start_method, sqlite_processor_settings, dags_folder
):
    settings = sqlite_processor_settings()
    (dags_folder / ".spawnflowignore").write_text("resource.py\n")
    dagfiles.write(dags_folder, "resource.py", dagfiles.HELPER_NAMED_LIKE_STDLIB)
    dagfiles.write(dags_folder, "good.py", dagfiles.good("good"))
    summary = run_once(settings)
    assert (summary.errors, set(stored_dags())) == ({}, {"good"})


def test_a_dag_built_by_an_imported_helper_stays_the_helpers(
    start_method, sqlite_processor_settings, dags_folder
):
    settings = sqlite_processor_settings()
    importer = dagfiles.write(dags_folder, "a_importer.py", dagfiles.IMPORTS_HELPER)
    helper = dagfiles.write(dags_folder, "z_helper.py", dagfiles.HELPER_MODULE_WITH_DAG)
    summary = run_once(settings)
    assert summary.errors == {}
    dags = stored_dags()
    assert {d: m.fileloc for d, m in dags.items()} == {
        "importer": str(importer), "helper_dag": str(helper),
    }  # fmt: skip


def test_the_parser_leaves_the_dag_files_logging_handlers_alone(
    start_method, sqlite_processor_settings, dags_folder
):
    settings = sqlite_processor_settings()
    path = dagfiles.write(dags_folder, "handler.py", dagfiles.SLOW_HANDLER)
    run_once(settings)
    assert set(stored_dags()) == {"handler"}
    assert not Path(f"{path}.closed").exists()


def test_a_process_a_dag_file_leaves_behind_is_killed(
    start_method, sqlite_processor_settings, dags_folder
):
    import psutil

    from tests.process.test_stop import gone

    settings = sqlite_processor_settings()
    path = dagfiles.write(dags_folder, "daemon.py", dagfiles.LEAVES_A_DAEMON)
    run_once(settings)
    daemon = int(Path(f"{path}.pid").read_text())
    try:
        assert gone(daemon), "the daemon a Dag file started outlived its parser"
    finally:
        if psutil.pid_exists(daemon):
            psutil.Process(daemon).kill()


def test_an_unchanged_dag_with_unusual_arguments_hashes_the_same_everywhere(
    start_method, sqlite_processor_settings, dags_folder
):
    settings = sqlite_processor_settings(**{"dag_processor.refresh_interval": "0"})
    dagfiles.write(dags_folder, "reprs.py", dagfiles.UNSTABLE_REPRS)
    manager = DagFileProcessorManager(settings)
    manager.run_pass()
    _, first = serialized("reprs")
    manager.run_pass()
    manager.run_pass()
    _, last = serialized("reprs")
    assert (last.dag_hash, last.last_updated) == (first.dag_hash, first.last_updated)
    document, _ = serialized("reprs")
    thing, names = document.task("use").arguments["op_args"]
    assert thing["__object__"].endswith(".Thing")  # a type name, never a memory address
    assert names == ["alpha", "beta", "delta", "gamma"]  # sorted, whatever the hash seed


@pytest.mark.skipif(not POSIX, reason="symbolic links")
def test_a_symlink_loop_in_the_dags_folder_parses_each_file_once(
    start_method, sqlite_processor_settings, dags_folder
):
    settings = sqlite_processor_settings()
    dagfiles.write(dags_folder, "inner/only.py", dagfiles.good("only"))
    (dags_folder / "inner" / "loop").symlink_to(dags_folder)
    summary = run_once(settings)
    assert (summary.files, summary.errors, set(stored_dags())) == (1, {}, {"only"})


def test_a_dag_that_moves_to_another_file_in_one_pass_follows_it(
    start_method, processor_settings, dags_folder
):
    settings = processor_settings(**{"dag_processor.refresh_interval": "0"})
    old = dagfiles.write(dags_folder, "z_old.py", dagfiles.good("moving"))
    manager = DagFileProcessorManager(settings)
    manager.run_pass()

    old.write_text(dagfiles.good("staying"))
    new = dagfiles.write(dags_folder, "a_new.py", dagfiles.good("moving"))
    summary = manager.run_pass()

    assert summary.errors == {}
    assert stored_dags()["moving"].fileloc == str(new)
    assert stored_dags()["moving"].is_active


# Run as a script. Each child's settings carry a value whose unpickling takes two
# seconds (BootDelay): under spawn, every parser's boot is that much slower.
SLOW_BOOT_PASS = """
import json, sys
if __name__ == "__main__":
    from spawnflow.bootstrap import settings
    from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
    from tests.fixtures.targets import BootDelay
    slow = settings.Override("core.load_examples", "false", BootDelay("--slow-boot"))
    settings.install(settings.resolve(overrides=[slow]))
    summary = DagFileProcessorManager(settings.current()).run(once=True)[0]
    print(json.dumps({"errors": summary.errors, "dags": summary.dags}))
"""


def test_a_slow_boot_does_not_eat_the_files_parsing_timeout(
    tmp_path, home, dags_folder, make_settings
):
    import json
    import os
    import subprocess
    import sys

    from spawnflow.models import schema

    dagfiles.write(dags_folder, "half_a_second.py", "import time\ntime.sleep(0.5)\n"
                   + dagfiles.good("half_a_second"))  # fmt: skip
    url = f"sqlite:///{tmp_path.as_posix()}/slow.db"
    make_settings(**{"database.url": url})
    schema.reset(url)
    script = tmp_path / "slow_boot.py"
    script.write_text(SLOW_BOOT_PASS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.update({
        "SPAWNFLOW_HOME": str(home), "SPAWNFLOW__DATABASE__URL": url,
        "SPAWNFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "SPAWNFLOW__CORE__LOAD_EXAMPLES": "false",
        "SPAWNFLOW__DAG_PROCESSOR__MP_START_METHOD": "spawn",
        # One second to parse a file that takes half of one, after a two-second boot.
        "SPAWNFLOW__DAG_PROCESSOR__FILE_PARSING_TIMEOUT": "1",
    })  # fmt: skip

    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parents[2])  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"errors": {}, "dags": 1}
