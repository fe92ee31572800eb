"""``--output json|yaml`` (issue 15): the listing commands print every field, typed,
times in RFC 3339 UTC, nothing shortened, an empty list when there is nothing; ``dags
show``, ``xcom get``, ``info`` and ``dags check`` print one object; ``config show`` prints
its sections, and TOML that round-trips. Tables: rich's, plain and whole when piped."""

from __future__ import annotations

import datetime as dt
import decimal
import importlib.util
import io
import json
import os
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select

from spawnflow.bootstrap import orm
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import settings as settings_module
from spawnflow.commands import output
from spawnflow.models import DagModel, TaskInstance
from spawnflow.models.run import Variable, XCom
from spawnflow.sdk import xcom
from tests.commands.test_cli import assert_user_error, run
from tests.processors import dagfiles


def listed(env: dict[str, str], *command: str, output: str = "json") -> list[dict]:
    result = run(*command, "--output", output, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if output == "json" else yaml.safe_load(result.stdout)


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_the_listings_print_typed_records(one_run, output):
    assert listed(one_run, "dags", "list", output=output) == [{
        "dag_id": "listed", "schedule": "@daily", "is_paused": True, "is_active": True,
        "tags": ["a", "b"], "fileloc": "/dags/listed.py",
    }]  # fmt: skip
    assert listed(one_run, "runs", "list", output=output) == [{
        "dag_id": "listed", "run_id": "r1", "run_type": "manual", "state": "success",
        "logical_date": "2026-01-02T03:04:05Z", "start_date": "2026-01-02T03:04:05Z",
        "end_date": None,
    }]  # fmt: skip
    assert listed(one_run, "tasks", "states", "listed", "r1", output=output) == [{
        "task_id": "only", "map_index": -1, "state": "failed", "try_number": 2,
        "start_date": "2026-01-02T03:04:05Z", "end_date": "2026-01-02T03:04:14Z",
        "reason": "boom",
    }]  # fmt: skip


def test_a_long_value_is_shortened_in_the_table_only(one_run, database_url):
    long = "x" * 100
    with orm.session_scope(database_url) as session:
        session.add(Variable(key="big", value=long))

    assert listed(one_run, "variables", "list") == [
        {"key": "big", "value": long, "description": None}
    ]
    table = run("variables", "list", env=one_run).stdout
    assert long not in table
    assert "x" * 57 + "..." in table


def test_nothing_to_list_is_an_empty_list_for_a_script(one_run):
    assert listed(one_run, "connections", "list") == []
    assert listed(one_run, "dags", "report") == []
    assert run("connections", "list", env=one_run).stdout.strip() == "No Connections."


def shown(env: dict[str, str], *command: str, output: str = "json", exit_code: int = 0) -> dict:
    """The one object a command prints with ``--output``."""
    result = run(*command, "--output", output, env=env)
    assert result.exit_code == exit_code, result.output
    found = json.loads(result.stdout) if output == "json" else yaml.safe_load(result.stdout)
    assert isinstance(found, dict)
    return found


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_dags_show_prints_the_dag_as_one_object(project, output):
    dagfiles.write(Path(project["SPAWNFLOW__CORE__DAGS_FOLDER"]), "good.py",
                   dagfiles.good("good", tasks=2))  # fmt: skip
    assert run("dag-processor", "--once", env=project).exit_code == 0

    dag = shown(project, "dags", "show", "good", output=output)

    assert {k: dag[k] for k in ("dag_id", "schedule", "catchup", "is_paused", "is_active",
                                "tags", "start_date")} == {
        "dag_id": "good", "schedule": "None (manual)", "catchup": False, "is_paused": False,
        "is_active": True, "tags": ["test"], "start_date": None,
    }  # fmt: skip
    assert dag["fileloc"].endswith("good.py")
    assert [(t["task_id"], t["kind"], t["trigger_rule"], t["retries"], t["upstream"])
            for t in dag["tasks"]] == [("t0", "command", "all_success", 0, []),
                                       ("t1", "command", "all_success", 0, [])]  # fmt: skip


def _push(database_url: str, key: str, text: str) -> None:
    """An XCom of task 'only' of one_run's run, stored in the database as ``text``."""
    with orm.session_scope(database_url) as session:
        ti = session.scalars(select(TaskInstance).where(TaskInstance.task_id == "only")).one()
        session.add(XCom(task_instance_id=ti.id, key=key, value=text, size=len(text)))


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_xcom_get_prints_the_value_typed_as_one_object(one_run, database_url, output):
    value = {"when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), "pair": (1, 2),
             "tags": {"b", "a"}, "raw": b"\x00\x01", "amount": decimal.Decimal("1.10"),
             "id": uuid.UUID(int=1), "took": dt.timedelta(seconds=90),
             "day": dt.date(2026, 1, 2)}  # fmt: skip
    _push(database_url, "return_value", xcom.encode(value))

    got = shown(one_run, "xcom", "get", "listed", "r1", "only", output=output)

    assert got == {"task_id": "only", "map_index": -1, "key": "return_value",
                   "stored_in": "database", "error": None, "value": {
        "when": "2026-01-02T03:04:05Z", "pair": [1, 2], "tags": ["a", "b"], "raw": "AAE=",
        "amount": "1.10", "id": "00000000-0000-0000-0000-000000000001", "took": 90.0,
        "day": "2026-01-02",
    }}  # fmt: skip


def test_xcom_get_of_an_unreadable_value_prints_why_and_exits_1(one_run, database_url):
    _push(database_url, "broken", "{not json")

    result = run("xcom", "get", "listed", "r1", "only", "broken", "-o", "json", env=one_run)

    assert_user_error(result, "XCom 'broken' of task 'only' cannot be read")
    got = json.loads(result.stdout)
    assert (got["key"], got["value"]) == ("broken", None)
    assert "cannot be read" in got["error"]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_info_prints_the_installation_as_one_object(home, monkeypatch, output):
    monkeypatch.setattr(platforms, "_current", platforms.LINUX)
    env = {"SPAWNFLOW__SCHEDULER__MP_START_METHOD": "spawn",
           "SPAWNFLOW__DATABASE__URL": "postgresql://admin:hunter2@db.example/flows"}  # fmt: skip

    found = shown(env, "info", output=output)

    assert found["start_methods"] == {"available": ["fork", "forkserver", "spawn"],
                                      "default": "forkserver"}  # fmt: skip
    assert found["components"]["core"] == {"start_method": "forkserver", "source": "the default"}
    assert found["components"]["scheduler"] == {
        "start_method": "spawn", "roles": ["scheduler", "dag-callback"],
        "source": "environment variable SPAWNFLOW__SCHEDULER__MP_START_METHOD",
    }  # fmt: skip
    assert found["components"]["executor"]["source"] == "[core]"
    assert found["config_file"] == {"path": str(home / "spawnflow.toml"), "exists": False,
                                    "source": "SPAWNFLOW_HOME"}  # fmt: skip
    assert found["dags_folder"] == {"path": str(home / "dags"), "exists": False}
    assert found["database"] == "postgresql://admin:***@db.example/flows"


def _settings_file(home: Path) -> dict[str, str]:
    """A config file with a number, a path and options with a secret; one more from the
    environment. The environment that finds them."""
    home.mkdir()
    (home / "spawnflow.toml").write_text(
        '[database]\nconnect_timeout = 4\n\n[core]\ndags_folder = "flows"\n\n[xcom]\n'
        'objectstorage_options = {key = "AKIA", endpoint_url = "http://127.0.0.1:9000"}\n'
    )
    return {"SPAWNFLOW__LOGGING__LEVEL": "debug"}


def _expected(environ: dict[str, str]) -> dict[str, dict[str, object]]:
    """Every set value as config show prints it: paths as text, secrets hidden."""
    settings = settings_module.resolve(environ={**os.environ, **environ})
    expected: dict[str, dict[str, object]] = {}
    for entry in settings.entries():
        value = entry.value
        if isinstance(value, Path):
            value = str(value)
        if isinstance(value, dict):
            value = {k: "***" if k == "key" else v for k, v in value.items()}
        if value is not None:
            expected.setdefault(entry.section, {})[entry.key] = value
    return expected


@pytest.mark.parametrize("sources", [[], ["--sources"]])
def test_config_show_round_trips_through_tomllib(home, sources):
    env = _settings_file(home)

    shown_toml = run("config", "show", *sources, env=env)

    assert shown_toml.exit_code == 0, shown_toml.output
    parsed = tomllib.loads(shown_toml.stdout)
    assert parsed == _expected(env)
    assert parsed["xcom"]["objectstorage_options"]["key"] == "***"
    assert parsed["core"]["dags_folder"] == str(home / "flows")
    assert "# mp_start_method is unset" in shown_toml.stdout  # TOML has no null


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_config_show_prints_sections_of_typed_values_and_with_sources_where_from(home, output):
    env = _settings_file(home)

    values = shown(env, "config", "show", output=output)
    sourced = shown(env, "config", "show", "--sources", output=output)

    expected = _expected(env)
    assert {s: {k: v for k, v in keys.items() if v is not None}
            for s, keys in values.items()} == expected  # fmt: skip
    assert values["dag_processor"]["mp_start_method"] is None  # unset: null, not left out
    assert {s: {k: v["value"] for k, v in keys.items()} for s, keys in sourced.items()} == values
    assert sourced["database"]["connect_timeout"] == {
        "value": 4, "layer": "file", "source": f"config file {home / 'spawnflow.toml'} line 2",
    }  # fmt: skip
    assert sourced["logging"]["level"] == {
        "value": "DEBUG", "layer": "env",
        "source": "environment variable SPAWNFLOW__LOGGING__LEVEL",
    }  # fmt: skip
    assert sourced["core"]["parallelism"]["layer"] == "default"


IMPORT_ORDER_AND_PRINTS = """
import sys

from spawnflow import CommandTask, Dag

print("printed at import", flush=True)
# What a forked parser inherited from its parent decides the tasks.
inherited = "inherited" if "sqlalchemy" in sys.modules else "fresh"
with Dag("import_order"):
    CommandTask(f"task_{inherited}", "exit 0")
"""


@pytest.mark.process
@pytest.mark.skipif("fork" not in platforms.current().start_methods, reason="no fork on this OS")
@pytest.mark.parametrize("output", ["json", "yaml"])
def test_dags_check_reports_a_difference_as_one_object_and_exits_1(project, tmp_path, output):
    path = dagfiles.write(tmp_path, "import_order.py", IMPORT_ORDER_AND_PRINTS)
    methods = list(platforms.current().start_methods)
    others = [m for m in methods if m != "fork"]

    report = shown(project, "dags", "check", str(path), "--parse-only", output=output,
                   exit_code=1)  # fmt: skip

    assert (report["verdict"], report["passed"], report["methods"]) == ("differs", False, methods)
    assert [(p["method"], p["loads"], p["dags"], p["tasks"]) for p in report["parses"]] == [
        (m, True, ["import_order"], 1) for m in methods
    ]
    assert report["tasks"] == []  # --parse-only
    (difference,) = report["differences"]
    tasks = " vs ".join(["fork: task_inherited", *(f"{m}: task_fresh" for m in others)])
    assert difference["what"] == (
        f"Dag 'import_order' differs between start methods: tasks ({tasks})"
    )
    assert difference["likely_cause"].startswith("the file depends on what was imported")
    assert report["summary"] == "1 difference(s) between start methods."


def test_dags_check_reports_each_tasks_outcome_per_method(project, tmp_path, start_method):
    failing = dagfiles.PASSES_A_VALUE.replace('return {"rows": 5}', 'return {"rows": 4}')
    path = dagfiles.write(tmp_path, "fails.py", failing)

    report = shown(project, "dags", "check", str(path), "--method", start_method,
                   exit_code=1)  # fmt: skip

    assert report["tasks"] == [
        {"dag_id": "passes_a_value", "task_id": "produce",
         "outcomes": {start_method: {"state": "success", "reason": None}}},
        {"dag_id": "passes_a_value", "task_id": "consume",
         "outcomes": {start_method: {"state": "failed", "reason": "ValueError: got {'rows': 4}"}}},
    ]  # fmt: skip
    assert report["differences"] == []
    assert report["failing_everywhere"] == [{"dag_id": "passes_a_value", "task_id": "consume",
                                             "reason": "ValueError: got {'rows': 4}"}]  # fmt: skip
    assert (report["verdict"], report["passed"]) == ("fails", False)
    assert report["summary"] == "1 task(s) fail under every start method."


def test_what_a_dag_file_prints_stays_out_of_the_report(project, tmp_path, home, start_method):
    # Run as the console script: a child writes to file descriptor 1, not to click's runner.
    path = dagfiles.write(tmp_path, "prints.py", IMPORT_ORDER_AND_PRINTS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.update(project, SPAWNFLOW_HOME=str(home))
    done = subprocess.run(
        [sys.executable, "-m", "spawnflow", "dags", "check", str(path), "--parse-only",
         "--method", start_method, "--output", "json"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"] == "one_method"
    assert "printed at import" in done.stderr


def test_a_piped_table_is_plain_ascii_with_every_cell_whole(one_run, database_url):
    deep = "/dags/" + "/".join(["folder"] * 40) + "/deep.py"
    with orm.session_scope(database_url) as session:
        session.add(DagModel(dag_id="deep", fileloc=deep, schedule="@hourly", tags="[]"))

    lines = run("dags", "list", env=one_run).stdout.splitlines()

    assert lines[0].split() == ["dag_id", "schedule", "paused", "active", "tags", "file"]
    assert set(lines[1]) == {"-"}
    assert lines[2].split() == ["deep", "@hourly", "no", "yes", deep]
    assert all(line.isascii() and line == line.rstrip() for line in lines)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_table_on_a_terminal_is_coloured_unless_no_color(monkeypatch):
    monkeypatch.setattr(sys, "stdout", _Terminal())
    monkeypatch.delenv("NO_COLOR", raising=False)
    if sys.platform == "win32" and importlib.util.find_spec("colorama") is None:
        pytest.skip("colours on Windows need colorama, a dependency there")

    coloured = output.table(["task", "state"], [["only", "failed"]])
    monkeypatch.setenv("NO_COLOR", "1")
    plain = output.table(["task", "state"], [["only", "failed"]])

    assert "\x1b[" in coloured
    assert "\x1b[" not in plain
    assert plain.splitlines()[0].split() == ["task", "state"]
    assert plain.splitlines()[2].split() == ["only", "failed"]


def test_cells_are_values_not_markup():
    text = output.table(["dag_id"], [["[bold]x[/bold] :smile:"]])
    assert text.splitlines()[2] == "[bold]x[/bold] :smile:"


@pytest.mark.parametrize("output", ["toml", "json", "yaml"])
def test_config_show_hides_the_database_password_and_config_get_does_not(home, output):
    env = {"SPAWNFLOW__DATABASE__URL": "postgresql+psycopg://ada:s3cret@db.example:5432/flows"}

    shown = run("config", "show", "-o", output, env=env)
    got = run("config", "get", "database.url", env=env)

    assert shown.exit_code == 0, shown.output
    assert "s3cret" not in shown.stdout
    assert "postgresql+psycopg://ada:***@db.example:5432/flows" in shown.stdout
    assert got.stdout.strip() == env["SPAWNFLOW__DATABASE__URL"]
