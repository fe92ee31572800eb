"""Templates in one process: the context, strict undefined names, nested fields, template
files, secrets kept out of the log. The supervisor is a fake channel, in process: nothing
crosses a process boundary here (the task process is tested in tests/commands)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from spawnflow.comms.tasks import (
    ConnectionData,
    ConnectionValue,
    GetConnection,
    GetVariable,
    VariableValue,
    XComPull,
    XComValue,
)
from spawnflow.sdk import Dag, runtime, xcom
from spawnflow.sdk.tasks import CommandTask, PythonTask, Task
from spawnflow.sdk.templates import Renderer, TemplateError, ds_add, ds_format, is_template

LOGICAL = dt.datetime(2026, 3, 1, 4, 5, 6, tzinfo=dt.UTC)


class Supervisor:
    """Answers Variable, Connection and XCom requests from dicts, as the supervisor does."""

    def __init__(self):
        self.variables = {"region": "eu", "config": '{"rows": 3}', "db_password": "hunter2"}
        self.xcoms = {("extract", "return_value"): 5, ("extract", "rows"): [1, 2]}
        self.asked: list[object] = []

    def next_id(self) -> int:
        return 1

    def call(self, request):
        self.asked.append(request)
        if isinstance(request, GetVariable):
            return VariableValue(id=1, value=self.variables.get(request.key))
        if isinstance(request, GetConnection):
            if request.conn_id != "warehouse":
                return ConnectionValue(id=1, connection=None)
            data = ConnectionData(conn_id="warehouse", conn_type="postgres", host="db.internal",
                                  login="etl", password="s3cret")  # fmt: skip
            return ConnectionValue(id=1, connection=data)
        assert isinstance(request, XComPull)
        value = self.xcoms.get((request.task_id, request.key))
        return XComValue(id=1, value=None if value is None else xcom.encode(value))


@pytest.fixture
def supervisor():
    parent = Supervisor()
    context = {
        "dag_id": "etl", "task_id": "load", "run_id": "manual__1", "logical_date": LOGICAL,
        "data_interval_start": LOGICAL - dt.timedelta(days=1), "data_interval_end": LOGICAL,
        "try_number": 2, "params": {"table": "orders", "limit": 10}, "conf": {"limit": 10},
    }  # fmt: skip
    runtime.install(parent, context)
    yield parent
    runtime.install(None, None)  # type: ignore[arg-type]


def command(text, **kwargs) -> CommandTask:
    with Dag("etl", params={"table": "orders"}):
        return CommandTask("load", text, **kwargs)


def rendered(task: Task) -> dict:
    return Renderer(task, runtime.get_current_context()).render_fields()


def test_dates_ids_params_and_macros(supervisor):
    task = command(
        "echo {{ ds }} {{ ds_nodash }} {{ ts }} {{ run_id }} {{ dag.dag_id }}.{{ task.task_id }} "
        "{{ params.table }} {{ params.limit }} {{ macros.ds_add(ds, 1) }} "
        "{{ data_interval_start.date() }} {{ ti.try_number }} {{ dag_run.conf.limit }}"
    )

    assert rendered(task) == {"command": task.command}
    assert task.command == (
        "echo 2026-03-01 20260301 2026-03-01T04:05:06+00:00 manual__1 etl.load orders 10 "
        "2026-03-02 2026-02-28 2 10"
    )


def test_variables_connections_and_xcoms_go_through_the_supervisor(supervisor):
    task = command(
        "echo {{ var.value.region }} {{ var.json.config.rows }} {{ var.value.get('nope', 'x') }} "
        "{{ conn.warehouse.host }} {{ ti.xcom_pull(task_ids='extract') }} "
        "{{ ti.xcom_pull(task_ids='extract', key='rows') | sum }} "
        "{{ ti.xcom_pull(task_ids=['extract', 'nobody'], default=0) }}"
    )

    rendered(task)

    assert task.command == "echo eu 3 x db.internal 5 3 [5, 0]"
    kinds = {type(request).__name__ for request in supervisor.asked}
    assert kinds == {"GetVariable", "GetConnection", "XComPull"}


def test_strings_nested_in_lists_and_dicts_are_rendered_and_other_values_kept(supervisor):
    with Dag("etl"):
        upstream = PythonTask("extract", print)
        task = PythonTask(
            "load", print, op_args=["{{ ds }}", 3, upstream.output],
            op_kwargs={"paths": ["/in/{{ ds_nodash }}", ("{{ params.table }}",)], "plain": "a"},
            templates_dict={"day": "{{ ds }}"},
        )  # fmt: skip

    fields = rendered(task)

    assert set(fields) == {"templates_dict", "op_args", "op_kwargs"}
    assert task.op_args[:2] == ("2026-03-01", 3)
    assert task.op_args[2].task is upstream  # an XComArg, pulled later
    assert task.op_kwargs == {"paths": ["/in/20260301", ("orders",)], "plain": "a"}
    assert task.templates_dict == {"day": "2026-03-01"}


def test_a_field_without_a_template_is_left_alone_and_not_reported(supervisor):
    task = command("echo plain", env={"A": "b"})

    assert rendered(task) == {}
    assert task.command == "echo plain"
    assert not is_template(task.env)


def test_env_and_cwd_of_a_command_are_templates(supervisor):
    task = command("echo", env={"DAY": "{{ ds }}"}, cwd="/data/{{ params.table }}")

    assert rendered(task) == {"env": {"DAY": "2026-03-01"}, "cwd": "/data/orders"}


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("echo {{ nosuch }}",
         "the template in field 'command' of task 'load' uses 'nosuch', which is undefined"),
        ("echo {{ params.nosuch }}",
         "the template in field 'command' of task 'load' uses params.nosuch, which is "
         "undefined (params has no 'nosuch')"),
        ("echo {{ var.value.nosuch }}",
         "the template in field 'command' of task 'load' reads Variable 'nosuch', and there "
         "is none (spawnflow variables set)"),
        ("echo {{ conn.nosuch.host }}",
         "the template in field 'command' of task 'load' reads Connection 'nosuch', and "
         "there is none"),
        ("echo {{ ds ",
         "the template in field 'command' of task 'load' is not valid Jinja2 (line 1): "),
        ("echo {{ ''.__class__ }}",
         "the template in field 'command' of task 'load' is not allowed by the sandbox"),
    ],
)  # fmt: skip
def test_a_template_that_cannot_be_rendered_names_the_task_the_field_and_the_cause(
    supervisor, template, message
):
    with pytest.raises(TemplateError) as raised:
        rendered(command(template))

    assert str(raised.value).startswith(message), str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_command_naming_a_script_next_to_the_dag_file_renders_the_script(
    supervisor, tmp_path: Path
):
    (tmp_path / "report.sh").write_text("echo report for {{ ds }}\n")
    task = command("report.sh")
    task.dag.fileloc = str(tmp_path / "etl.py")

    rendered(task)

    assert task.command == "echo report for 2026-03-01\n"


def test_a_command_naming_no_file_next_to_the_dag_is_a_plain_command(supervisor, tmp_path):
    task = command("cleanup.sh")
    task.dag.fileloc = str(tmp_path / "etl.py")

    assert rendered(task) == {}
    assert task.command == "cleanup.sh"


def test_the_log_shows_rendered_values_without_the_secrets_they_read(supervisor):
    task = command("psql -p {{ var.value.db_password }} -P {{ conn.warehouse.password }}")
    renderer = Renderer(task, runtime.get_current_context())

    fields = renderer.render_fields()

    assert task.command == "psql -p hunter2 -P s3cret"
    assert renderer.shown(fields["command"]) == "psql -p *** -P ***"


def test_date_macros():
    assert ds_add("2026-02-28", 1) == "2026-03-01"
    assert ds_add("2026-03-01", -1) == "2026-02-28"
    assert ds_format("2026-03-01", "%Y-%m-%d", "%d/%m/%Y") == "01/03/2026"


class Copy(Task):
    """A task class of a user's own: its template fields are its to name."""

    kind = "copy"
    template_fields = ("source", "target")

    def __init__(self, task_id: str, source: str, target: str, **kwargs):
        self.source, self.target = source, target
        super().__init__(task_id, **kwargs)


def test_a_task_class_of_its_own_names_its_template_fields(supervisor):
    with Dag("etl"):
        task = Copy("copy", "/in/{{ ds }}", "/out/{{ params.table }}")
    task.untemplated = "{{ ds }}"

    assert rendered(task) == {"source": "/in/2026-03-01", "target": "/out/orders"}
    assert task.untemplated == "{{ ds }}"
