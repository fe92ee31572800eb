"""The pytest plugin, as a user's project uses it (issue 16): a test file of theirs, run by
a pytest of its own (pytester, in a subprocess) with pytest-xdist, under start methods."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

from spawnflow.bootstrap import startmethods
from tests.commands.test_dags_check import LAMBDA_IN_A_PROCESS
from tests.conftest import SERVER_URLS, _server_database, backends_under_test

pytestmark = pytest.mark.process

ADDS_UP = """
import datetime as dt

from spawnflow import Dag, task


@task
def numbers():
    return [1, 2, 3]


@task
def total(values):
    return sum(values)


with Dag("adds_up", schedule=None, start_date=dt.datetime(2026, 1, 1)):
    total(numbers())
"""


@pytest.fixture
def users_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                  pytestconfig: pytest.Config) -> pytest.Pytester:  # fmt: skip
    """A project of a user's, in a folder of its own, with the Dag above beside its tests."""
    # The OS simulation reaches the user's pytest and its children through PYTHONPATH,
    # which must not depend on the folder they run in (pytester's, by now).
    started_in = pytestconfig.invocation_params.dir
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(str(started_in / p) for p in paths))
    pytester.makepyfile(dag_sources=f"ADDS_UP = {ADDS_UP!r}\n"
                        f"LAMBDA_IN_A_PROCESS = {LAMBDA_IN_A_PROCESS!r}\n")  # fmt: skip
    return pytester


def test_a_users_dag_tests_pass_under_every_start_method_with_xdist(users_project):
    users_project.makepyfile(test_dags='''
        from dag_sources import ADDS_UP


        def test_the_run_adds_up(spawnflow_env):
            spawnflow_env.add_dag_file("adds_up", ADDS_UP)

            result = spawnflow_env.run_dag("adds_up", conf={"who": "me"})

            result.assert_succeeded()
            assert result["numbers"].xcoms == {"return_value": [1, 2, 3]}
            assert result["total"].return_value == 6
            assert result["total"].tries == 1
            assert "task succeeded" in result["total"].log


        def test_one_task_with_the_xcoms_it_pulls(spawnflow_env, spawnflow_start_method):
            spawnflow_env.add_dag_file("adds_up", ADDS_UP)

            result = spawnflow_env.run_task("adds_up", "total", upstream_xcoms={"numbers": [4, 5]})

            assert (result.state, result.return_value) == ("success", 9)
            assert spawnflow_env.settings.core.mp_start_method == spawnflow_start_method
    ''')  # fmt: skip

    done = users_project.runpytest_subprocess("-n", "2", "--spawnflow-start-methods=all", "-v")

    methods = startmethods.available()
    done.assert_outcomes(passed=2 * len(methods))
    for method in methods:
        done.stdout.fnmatch_lines([f"*PASSED test_dags.py::test_the_run_adds_up?sf-{method}?*"])


def test_a_task_that_works_only_under_fork_fails_under_spawn_saying_why(users_project):
    users_project.makepyfile(test_fork_only='''
        import pytest

        from dag_sources import LAMBDA_IN_A_PROCESS


        @pytest.mark.spawnflow_start_methods("spawn")
        def test_the_task_runs(spawnflow_env):
            spawnflow_env.add_dag_file("lambda_in_a_process", LAMBDA_IN_A_PROCESS)

            spawnflow_env.run_dag("lambda_in_a_process").assert_succeeded()


        def test_the_file_is_start_method_safe(spawnflow_env):
            path = spawnflow_env.add_dag_file("lambda_in_a_process", LAMBDA_IN_A_PROCESS)

            spawnflow_env.check_dag_file(path, task_timeout=60)
    ''')  # fmt: skip

    done = users_project.runpytest_subprocess("-n", "2")

    done.assert_outcomes(failed=2)
    done.stdout.fnmatch_lines([
        "*run 'manual__*' of Dag 'lambda_in_a_process' under spawn: failed",
        "*task 'starts_a_process': failed (*PicklingError: Can't pickle <function <lambda>*",
    ], consecutive=False)  # fmt: skip
    others = [m for m in startmethods.available() if m != "fork"]
    if "fork" in startmethods.available():
        done.stdout.fnmatch_lines([
            "*DagCheckFailed: *lambda_in_a_process.py is not start-method safe (*):",
            f"*- task 'starts_a_process' of Dag 'lambda_in_a_process' succeeds under fork but "
            f"not under {', '.join(others)}: *PicklingError*likely cause: something the task "
            "hands to a child process*",
        ])  # fmt: skip
    else:  # macOS and Windows: nothing to compare with, and the task fails under each
        done.stdout.fnmatch_lines([
            "*- task 'starts_a_process' of Dag 'lambda_in_a_process' fails under every start "
            "method: *PicklingError*",
        ])  # fmt: skip


def test_the_leftover_fixture_fails_a_test_that_leaks_a_process(users_project):
    users_project.makeini("[pytest]\nspawnflow_leftover_grace = 1\n")
    users_project.makepyfile(test_leaks='''
        import subprocess
        import sys

        from dag_sources import ADDS_UP


        def test_leaks_a_child(spawnflow_no_leftover_processes):
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


        def test_a_dag_run_leaves_nothing(spawnflow_no_leftover_processes, spawnflow_env):
            spawnflow_env.add_dag_file("adds_up", ADDS_UP)
            spawnflow_env.run_dag("adds_up").assert_succeeded()
    ''')  # fmt: skip

    done = users_project.runpytest_subprocess()

    # The leaking test passed, then its fixture's teardown failed it.
    done.assert_outcomes(passed=2, errors=1)
    done.stdout.fnmatch_lines(["*the test left 1 process(es) running: pid * (*time.sleep(600)*"])


def test_an_unknown_start_method_is_a_usage_error(users_project):
    users_project.makepyfile(test_any="def test_it(spawnflow_env):\n    pass\n")

    done = users_project.runpytest_subprocess("--spawnflow-start-methods=spawn,sporn")

    assert done.ret == pytest.ExitCode.USAGE_ERROR
    done.stderr.fnmatch_lines(["*--spawnflow-start-methods names sporn, which this OS does "
                               "not have; it has *"])  # fmt: skip


@pytest.mark.parametrize("server", [b for b in backends_under_test() if b != "sqlite"])
def test_a_database_server_gets_a_database_per_worker_dropped_at_the_end(
    users_project, server, worker_id, testrun_uid
):
    _server_database(server, f"spawnflow_test_{testrun_uid[:10]}_{worker_id}")  # or skip
    users_project.makepyfile(test_on_a_server='''
        import pytest

        from dag_sources import ADDS_UP


        @pytest.mark.parametrize("n", [1, 2])
        def test_each_starts_empty(spawnflow_env, n, tmp_path_factory):
            import sqlalchemy as sa

            spawnflow_env.add_dag_file("adds_up", ADDS_UP)
            spawnflow_env.run_dag("adds_up").assert_succeeded()
            engine = sa.create_engine(spawnflow_env.database_url)
            with engine.connect() as connection:
                runs = connection.execute(sa.text("SELECT count(*) FROM dag_run")).scalar()
            engine.dispose()
            assert runs == 1  # the other test's run is gone
            name = sa.make_url(spawnflow_env.database_url).database
            (tmp_path_factory.getbasetemp().parent / f"used-{name}").write_text("")
    ''')  # fmt: skip

    url = SERVER_URLS[server]
    done = users_project.runpytest_subprocess("-n", "2", f"--spawnflow-database-url={url}")

    done.assert_outcomes(passed=2)
    used = {p.name.removeprefix("used-") for p in users_project.path.rglob("used-*")}
    assert used, "the tests said nothing about their databases"
    engine = sa.create_engine(SERVER_URLS[server])
    try:
        with engine.connect() as connection:
            listed = "SELECT datname FROM pg_database" if server == "postgres" else "SHOW DATABASES"
            left = {row[0] for row in connection.execute(sa.text(listed))}
    finally:
        engine.dispose()
    assert not used & left, f"databases left on the server: {used & left}"


def test_reuse_db_keeps_the_migrated_database_between_sessions(users_project, monkeypatch,
                                                               tmp_path):  # fmt: skip
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # platformdirs' on Linux
    users_project.makepyfile(test_any='''
        def test_runs(spawnflow_env):
            spawnflow_env.add_dag_file("adds_up", __import__("dag_sources").ADDS_UP)
            spawnflow_env.run_dag("adds_up").assert_succeeded()
    ''')  # fmt: skip

    users_project.runpytest_subprocess("--spawnflow-reuse-db").assert_outcomes(passed=1)
    (template,) = (tmp_path / "cache").rglob("template-*.db")
    made = template.stat().st_mtime_ns
    users_project.runpytest_subprocess("--spawnflow-reuse-db").assert_outcomes(passed=1)

    assert template.stat().st_mtime_ns == made  # used again as it was, not migrated again
