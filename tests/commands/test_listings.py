"""``dags list``, ``runs list`` and ``tasks states``: what they print, and what they
leave unimported (SQLAlchemy Core only: no ORM, no declarative models, no Alembic)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spawnflow.bootstrap import orm
from tests.commands.test_cli import assert_user_error, run

#: What a listing command never imports: each costs it CPU at start and gives it nothing.
#: rich is not among them: it draws the tables (issue 15), for 25 to 45 ms of CPU per
#: command, measured on a 2-core machine under a load of 5 to 9: `dags list`, paired
#: medians of 40 interleaved runs against the hand-drawn tables, +34 and +43 ms (on about
#: 400 ms); rich's import and a first table in process, medians of 20 and 40, 29 and 26 ms.
HEAVY = ("sqlalchemy.orm", "alembic", "structlog", "psutil", "spawnflow.sdk",
         "spawnflow.processors")  # fmt: skip
#: The dialects of SQLAlchemy that spawnflow's models import; a command needs only its own.
DIALECTS = ("postgresql", "mysql")
#: The only spawnflow.models modules a listing command needs.
LIGHT_MODELS = {"spawnflow.models", "spawnflow.models.schema", "spawnflow.models.views"}


def test_the_listing_commands_print_the_stored_rows(one_run):
    dags = run("dags", "list", env=one_run).stdout.splitlines()
    assert dags[2].split() == ["listed", "@daily", "yes", "yes", "a,", "b", "/dags/listed.py"]
    runs = run("runs", "list", env=one_run).stdout.splitlines()
    assert runs[2].split() == ["listed", "r1", "manual", "success", "2026-01-02", "03:04:05",
                               "2026-01-02", "03:04:05", "-"]  # fmt: skip
    states = run("tasks", "states", "listed", "r1", env=one_run).stdout.splitlines()
    assert states[2].split() == ["only", "failed", "2", "2026-01-02", "03:04:05", "2026-01-02",
                                 "03:04:14", "boom"]  # fmt: skip


def test_tasks_states_of_a_missing_run_names_it(one_run):
    result = run("tasks", "states", "listed", "r2", env=one_run)
    assert_user_error(result, "Dag 'listed' has no run 'r2'", "spawnflow runs list")


def modules_imported_by(command: list[str], home, database_url: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``command`` as the console
    script does (this one has imported all of spawnflow for other tests)."""
    code = (
        "import sys\nfrom spawnflow.commands import cli\n"
        f"cli.main({command!r}, prog_name='spawnflow', standalone_mode=False)\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.update(SPAWNFLOW_HOME=str(home), SPAWNFLOW__DATABASE__URL=database_url,
               SPAWNFLOW__CORE__LOAD_EXAMPLES="false")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return set(done.stdout.strip().splitlines()[-1].split())


@pytest.mark.parametrize(
    "command", [["dags", "list"], ["runs", "list"], ["tasks", "states", "listed", "r1"]]
)
def test_a_listing_command_imports_neither_the_orm_nor_the_models(
    command, one_run, home, database_url
):
    imported = modules_imported_by(command, home, database_url)
    assert "sqlalchemy" in imported  # it did read the database
    own = orm.normalize_url(database_url).get_dialect().__module__.split(".")[2]  # mariadb: mysql
    unwanted = (*HEAVY, *(f"sqlalchemy.dialects.{d}" for d in DIALECTS if d != own))
    heavy = {m for m in imported if any(m == u or m.startswith(f"{u}.") for u in unwanted)}
    assert heavy == set()
    assert {m for m in imported if m.startswith("spawnflow.models")} == LIGHT_MODELS
