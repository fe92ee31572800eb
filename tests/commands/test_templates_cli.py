"""Templates through real task processes, under every start method (issue 18): a
CommandTask and a Python task rendered by ``dags test`` and by the scheduler, an
undefined name failing the try with one sentence, and ``tasks render`` (its errors too)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pytest

from tests.commands.test_cli import assert_user_error, run

pytestmark = pytest.mark.process

PYTHON = sys.executable.replace("\\", "\\\\")
DAG_FILE = f'''
from spawnflow import CommandTask, Dag, task

PYTHON = "{PYTHON}"

with Dag("templated", params={{"greeting": "hello", "table": "orders"}}):

    @task
    def produce():
        return 7

    echo = CommandTask(
        "echo_it",
        f'"{{PYTHON}}" -c "import os; print(os.environ[\\'DAY_ENV\\'])" && '
        "echo day={{{{ ds }}}} var={{{{ var.value.region }}}} "
        "rows={{{{ ti.xcom_pull(task_ids='produce') }}}} p={{{{ params.greeting }}}}",
        env={{"DAY_ENV": "env={{{{ ds_nodash }}}}"}},
    )
    produce() >> echo

    @task(templates_dict={{"who": "{{{{ params.table }}}} of {{{{ dag.dag_id }}}}"}})
    def python_side(day, templates_dict):
        return f"{{day}}: {{templates_dict['who']}}"

    python_side("{{{{ ds }}}}")

    @task.command
    def built(n):  # the command it returns is a template too
        return "echo built {{{{ ds }}}} " + str(n)

    built(3)

with Dag("undefined_name"):
    CommandTask("broken", "echo {{{{ params.nosuch }}}}")
'''
UNDEFINED = (
    "the template in field 'command' of task 'broken' uses params.nosuch, which is undefined "
    "(params has no 'nosuch')"
)


@pytest.fixture
def project(tmp_path: Path, home, start_method) -> dict[str, str]:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "templated.py").write_text(DAG_FILE)
    env = {
        "SPAWNFLOW__CORE__DAGS_FOLDER": str(dags),
        "SPAWNFLOW__CORE__LOAD_EXAMPLES": "false",
        "SPAWNFLOW__CORE__MP_START_METHOD": start_method,
        "SPAWNFLOW__EXECUTOR__PARALLELISM": "2",
        "SPAWNFLOW__EXECUTOR__HEARTBEAT_INTERVAL": "0.2",
        "SPAWNFLOW__SCHEDULER__LOOP_INTERVAL": "0.1",
    }
    assert run("db", "migrate", env=env).exit_code == 0
    assert run("variables", "set", "region", "eu", env=env).exit_code == 0
    return env


def latest_run(env: dict[str, str]) -> tuple[str, dt.datetime]:
    listed = run("runs", "list", "--dag-id", "templated", "-o", "json", env=env)
    newest = json.loads(listed.stdout)[0]
    return newest["run_id"], dt.datetime.fromisoformat(newest["logical_date"])


def xcom_of(env: dict[str, str], run_id: str, task_id: str) -> str:
    got = run("xcom", "get", "templated", run_id, task_id, "-o", "json", env=env)
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)["value"]


def assert_rendered(env: dict[str, str], run_id: str, logical: dt.datetime, greeting: str):
    ds = logical.strftime("%Y-%m-%d")
    assert xcom_of(env, run_id, "echo_it") == f"day={ds} var=eu rows=7 p={greeting}"
    assert xcom_of(env, run_id, "python_side") == f"{ds}: orders of templated"
    assert xcom_of(env, run_id, "built") == f"built {ds} 3"
    log = run("tasks", "logs", "templated", run_id, "echo_it", env=env).stdout
    assert f"[stdout] env={logical.strftime('%Y%m%d')}" in log  # the env was rendered
    assert "template rendered" in log
    assert f"day={ds} var=eu rows=7" in log  # the rendered command, in the try's log


def test_dags_test_renders_commands_and_python_arguments_in_the_task_process(project):
    result = run("dags", "test", "templated", "--conf", '{"greeting": "hi"}', env=project)

    assert result.exit_code == 0, result.output
    run_id, logical = latest_run(project)
    assert_rendered(project, run_id, logical, greeting="hi")  # the run's conf over params


def test_the_scheduler_renders_them_too(project):
    assert run("dag-processor", "--once", env=project).exit_code == 0
    assert run("dags", "trigger", "templated", env=project).exit_code == 0

    assert run("scheduler", "--exit-when-idle", env=project).exit_code == 0

    run_id, logical = latest_run(project)
    states = run("tasks", "states", "templated", run_id, env=project).stdout
    assert states.count("success") == 4, states
    assert_rendered(project, run_id, logical, greeting="hello")


def test_an_undefined_name_fails_the_try_with_one_sentence(project):
    result = run("dags", "test", "undefined_name", env=project)

    assert result.exit_code == 1
    ended = [line for line in result.stdout.splitlines() if "broken: failed after" in line]
    assert ended, result.stdout
    assert ended[0].endswith(f"({UNDEFINED})")
    assert "Traceback" not in result.stdout


def test_tasks_render_prints_each_field_for_a_run_without_running_it(project):
    assert run("dags", "test", "templated", env=project).exit_code == 0
    run_id, logical = latest_run(project)
    assert run("variables", "set", "region", "us", env=project).exit_code == 0

    result = run("tasks", "render", "templated", "echo_it", "--run-id", run_id, env=project)

    assert result.exit_code == 0, result.output
    ds = logical.strftime("%Y-%m-%d")
    lines = result.stdout.splitlines()
    assert lines[0] == "# command"
    assert lines[1].endswith(f"echo day={ds} var=us rows=7 p=hello")  # the stored XCom
    assert lines[2:] == ["# env", json.dumps({"DAY_ENV": f"env={logical:%Y%m%d}"}), "# cwd",
                         "null"]  # fmt: skip
    assert len(run("tasks", "states", "templated", run_id, env=project).stdout.splitlines()) > 2


def test_tasks_render_for_a_date_without_a_run(project):
    result = run("tasks", "render", "templated", "python_side", "--logical-date", "2026-02-03",
                 env=project)  # fmt: skip

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "# templates_dict", '{"who": "orders of templated"}', "# op_args", '["2026-02-03"]',
        "# op_kwargs", "{}",
    ]  # fmt: skip
    echo = run("tasks", "render", "templated", "echo_it", "--logical-date", "2026-02-03",
               env=project)  # fmt: skip
    built = run("tasks", "render", "templated", "built", env=project)
    assert built.stdout.splitlines()[:2] == [
        "# command",
        "(the command built returns when the task runs)",
    ]
    assert "echo day=2026-02-03 var=eu rows=None p=hello" in echo.stdout  # no run, no XCom


@pytest.mark.parametrize(
    ("args", "fragments", "code"),
    [
        (["templatd", "echo_it"], ["'templatd'", "did you mean 'templated'"], 1),
        (["templated", "echo"], ["Dag 'templated' has no task 'echo'", "echo_it"], 1),
        (["templated", "echo_it", "--run-id", "nope"], ["'nope'"], 1),
        (["templated", "echo_it", "--logical-date", "someday"],
         ["'someday' is not an ISO 8601 date or time"], 2),
        (["templated", "echo_it", "--logical-date", "2026-01-01", "--run-id", "x"],
         ["give --logical-date or --run-id, not both"], 2),
        (["undefined_name", "broken"],
         ["Task 'broken' of Dag 'undefined_name' could not be rendered: " + UNDEFINED], 1),
    ],
)  # fmt: skip
def test_tasks_render_errors_are_one_sentence(project, args, fragments, code):
    result = run("tasks", "render", *args, env=project)

    assert_user_error(result, *fragments, exit_code=code)


def test_the_readme_example_renders(project):
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("### Templates") :]
    code = section[section.index("```python\n") + 10 : section.index("```\n", 10)]
    (Path(project["SPAWNFLOW__CORE__DAGS_FOLDER"]) / "exports.py").write_text(code)
    assert run("variables", "set", "bucket", "s3://out", env=project).exit_code == 0
    added = run("connections", "add", "warehouse", "--uri",
                "postgres://etl:s3cret@db.internal:5432/shop", env=project)  # fmt: skip
    assert added.exit_code == 0, added.output

    export = run("tasks", "render", "exports", "export", "--logical-date", "2026-03-01",
                 env=project)  # fmt: skip
    week = run("tasks", "render", "exports", "week", "--logical-date", "2026-03-01", env=project)

    assert export.exit_code == 0, export.output
    assert export.stdout.splitlines()[:4] == [
        "# command",
        "export-table orders --day 2026-03-01 --rows None --bucket s3://out",  # no run yet
        "# env",
        '{"DB_HOST": "db.internal"}',
    ]
    assert week.exit_code == 0, week.output
    assert week.stdout.splitlines()[:4] == [
        "# templates_dict", '{"since": "2026-02-22"}', "# op_args", '["2026-03-01"]',
    ]  # fmt: skip


SCRIPTED = """
from spawnflow import CommandTask, Dag

with Dag("scripted"):
    CommandTask("from_file", "report.sh")
    CommandTask("secret", "echo login {{ conn.warehouse.login }} {{ conn.warehouse.password }}")
"""


def test_a_script_next_to_the_dag_file_is_rendered_and_secrets_stay_out_of_the_log(project):
    dags = Path(project["SPAWNFLOW__CORE__DAGS_FOLDER"])
    (dags / "scripted.py").write_text(SCRIPTED)
    (dags / "report.sh").write_text("echo report for {{ ds }} of {{ dag.dag_id }}\n")
    added = run("connections", "add", "warehouse", "--uri",
                "postgres://etl:s3cret-pw@db.internal:5432/shop", env=project)  # fmt: skip
    assert added.exit_code == 0, added.output

    tested = run("dags", "test", "scripted", env=project)

    assert tested.exit_code == 0, tested.output
    listed = run("runs", "list", "--dag-id", "scripted", "-o", "json", env=project)
    newest = json.loads(listed.stdout)[0]
    run_id, ds = newest["run_id"], newest["logical_date"][:10]
    got = run("xcom", "get", "scripted", run_id, "from_file", "-o", "json", env=project)
    assert json.loads(got.stdout)["value"] == f"report for {ds} of scripted"
    log = run("tasks", "logs", "scripted", run_id, "secret", env=project).stdout
    assert "[stdout] login etl s3cret-pw" in log  # what the command printed is its own
    assert "template rendered field=command value=echo login etl ***\n" in log, log
    rendered = run("tasks", "render", "scripted", "secret", env=project)
    assert rendered.stdout.splitlines()[:2] == ["# command", "echo login etl ***"]
