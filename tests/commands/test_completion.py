"""Shell completion (issue 15): the CLI run as the shell runs it, with click's
protocol (``_SPAWNFLOW_COMPLETE=bash_complete``, ``COMP_WORDS``, ``COMP_CWORD``),
offers the Dag ids, task ids and run ids of the metadata database, quietly nothing
without one, and never loads the ORM for it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spawnflow.bootstrap import orm
from spawnflow.commands import cli
from tests.commands import stored_dags
from tests.commands.conftest import STARTED
from tests.commands.test_cli import run, walk
from tests.commands.test_listings import HEAVY

ID_PARAMETERS = ("dag_id", "dag_id_option", "task_id", "task_ids", "run_id",
                 "logical_date_or_run_id")  # fmt: skip


def environment(home, **variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.update(SPAWNFLOW_HOME=str(home), SPAWNFLOW__CORE__LOAD_EXAMPLES="false", **variables)
    return env


def complete(line: str, env: dict[str, str], *, code: str | None = None):
    """The completed subprocess for the command line ``line`` (Tab at its end); with
    ``code``, run that instead of the console script, with the same environment."""
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    env = {**env, "_SPAWNFLOW_COMPLETE": "bash_complete", "COMP_WORDS": line,
           "COMP_CWORD": str(cword)}  # fmt: skip
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "spawnflow"]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def offered(line: str, env: dict[str, str]) -> list[str]:
    """What bash is offered for ``line``: click answers ``type,value`` lines (an empty
    line for nothing)."""
    done = complete(line, env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return [entry.partition(",")[2] for entry in done.stdout.splitlines() if entry]


@pytest.fixture
def stored(one_run, database_url, home) -> dict[str, str]:
    """one_run's Dag 'listed' (runs 'r1' and a scheduled one, tasks 'only' then 'second')
    and Dag 'nightly', inactive Dag 'gone'; the environment of a subprocess that finds
    them."""
    with orm.session_scope(database_url) as session:
        stored_dags.store(session, "listed", ["only", "second"], model=False)
        stored_dags.scheduled_run(session, "listed", STARTED)
        stored_dags.store(session, "nightly", ["report"])
        stored_dags.store(session, "gone", ["a"])
    with orm.session_scope(database_url) as session:
        from spawnflow.models import DagModel

        session.get(DagModel, "gone").is_active = False
    return environment(home, SPAWNFLOW__DATABASE__URL=database_url)


SCHEDULED = f"scheduled__{STARTED.isoformat()}"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("spawnflow dags show ", ["listed", "nightly"]),
        ("spawnflow dags show li", ["listed"]),
        ("spawnflow dags show x", []),
        ("spawnflow runs list --dag-id n", ["nightly"]),
        ("spawnflow dags list-runs -d ", ["listed", "nightly"]),
        ("spawnflow tasks test listed ", ["only", "second"]),
        ("spawnflow tasks test nightly ", ["report"]),
        ("spawnflow tasks test unknown ", []),
        ("spawnflow tasks states listed ", [SCHEDULED, "r1", "latest"]),
        ("spawnflow tasks states listed r", ["r1"]),
        ("spawnflow tasks states listed l", ["latest"]),
        ("spawnflow tasks states nightly ", []),
        ("spawnflow tasks logs listed r1 s", ["second"]),
        ("spawnflow tasks clear listed r1 only ", ["only", "second"]),
        ("spawnflow dags state listed sch", [SCHEDULED]),
        ("spawnflow xcom get listed r1 ", ["only", "second"]),
    ],
)
def test_completion_offers_the_stored_dag_task_and_run_ids(stored, line, expected):
    assert offered(line, stored) == expected


def test_completion_still_completes_commands(stored):
    assert offered("spawnflow dags li", stored) == ["list", "list-import-errors", "list-runs"]


def test_completion_reads_the_database_the_command_line_names(stored, home):
    url = stored["SPAWNFLOW__DATABASE__URL"]
    env = environment(home)  # the default database: not there
    assert offered(f"spawnflow --database-url {url} dags show ", env) == ["listed", "nightly"]
    assert offered(f"spawnflow --set database.url={url} dags show ", env) == ["listed", "nightly"]


def test_completion_without_a_database_offers_nothing_and_makes_none(home, tmp_path):
    missing = tmp_path / "never.db"
    env = environment(home, SPAWNFLOW__DATABASE__URL=f"sqlite:///{missing.as_posix()}")
    for line in ("spawnflow dags show ", "spawnflow tasks states listed ",
                 "spawnflow tasks test listed "):  # fmt: skip
        assert offered(line, env) == []
    assert not missing.exists()


def test_completion_with_an_unmigrated_database_offers_nothing(home, empty_database_url):
    env = environment(home, SPAWNFLOW__DATABASE__URL=empty_database_url)
    assert offered("spawnflow dags show ", env) == []


def test_completion_with_a_broken_config_file_offers_nothing(stored, home):
    home.mkdir(exist_ok=True)
    (home / "spawnflow.toml").write_text("[core\n")
    assert offered("spawnflow dags show ", stored) == []


def test_every_dag_task_and_run_id_parameter_completes():
    params = [(path, p) for path, command in walk(cli) for p in command.params
              if p.name in ID_PARAMETERS]  # fmt: skip
    assert len(params) > 20
    assert [(path, p.name) for path, p in params if p._custom_shell_complete is None] == []


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_script_of_each_shell(shell, home):
    result = run("completion", shell)
    assert result.exit_code == 0, result.output
    assert f"_SPAWNFLOW_COMPLETE={shell}_complete" in result.stdout
    # The script click prints for the environment variable's way.
    env = {**environment(home), "_SPAWNFLOW_COMPLETE": f"{shell}_source"}
    sourced = subprocess.run([sys.executable, "-m", "spawnflow"], capture_output=True, text=True,
                             env=env, timeout=120)  # fmt: skip
    assert sourced.stdout == result.stdout


def test_completion_of_a_shell_click_has_no_script_for_is_a_usage_error():
    result = run("completion", "powershell")
    assert result.exit_code == 2
    assert "'powershell' is not one of 'bash', 'zsh', 'fish'" in result.stderr


def test_completion_imports_neither_the_orm_nor_the_models(stored):
    code = (
        "import sys\nfrom spawnflow.__main__ import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    done = complete("spawnflow tasks states listed ", stored, code=code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "plain,r1" in lines  # it did read the database
    imported = set(lines[-1].split())
    heavy = {m for m in imported if any(m == u or m.startswith(f"{u}.") for u in HEAVY)}
    assert heavy == set()
    assert {m for m in imported if m.startswith("spawnflow.models")} <= {
        "spawnflow.models", "spawnflow.models.views"
    }  # fmt: skip
