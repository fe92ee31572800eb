"""Jinja2 templates in task arguments: ``{{ ds }}``, ``{{ params.x }}``, ``{{ var.value.key }}``.

A task kind names the attributes that are templates in ``template_fields`` (a
``CommandTask``: ``command``, ``env`` and ``cwd``; a Python task: ``templates_dict``,
``op_args`` and ``op_kwargs``). They are rendered in the task process, just before the
task's code runs, never in the scheduler: a template may read Variables, Connections
and other tasks' XComs, which only a running task can ask its supervisor for. Strings
nested in lists, tuples and dicts are rendered too; an upstream task's output
(:class:`~spawnflow.sdk.tasks.XComArg`) is left for the runner to pull.

The environment is Jinja2's sandbox with strict undefined names. Airflow renders an
unknown name as an empty string by default, so ``rm -rf /data/{{ params.dir }}`` with a
misspelt ``dir`` runs on ``/data/``; here the try fails instead, with one sentence that
names the task, the field and the name.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spawnflow.sdk.tasks import Task

#: A string with one of these is a template; others are left as they are (and Jinja2 is
#: not even imported for a task without templates).
_MARKERS = ("{{", "{%", "{#")
#: Variable keys whose values a log must not show (Airflow's sensitive names).
_SENSITIVE = re.compile(
    r"access_token|api_key|apikey|authorization|passphrase|passwd|password|private_key|"
    r"secret|token",
    re.IGNORECASE,
)
#: Shorter secrets are not masked (Airflow's default too): hiding every "a" or "1" in a
#: log would make it unreadable and tell a reader the secret anyway.
_MIN_MASKED = 5


class TemplateError(Exception):
    """A template that cannot be rendered; the message names the task, field and cause."""


def template_fields(task: Task) -> tuple[str, ...]:
    """The attributes of ``task`` that are templates."""
    return tuple(getattr(task, "template_fields", ()))


def is_template(value: Any) -> bool:
    """Whether ``value`` holds a string with a Jinja2 marker, at any depth."""
    if isinstance(value, str):
        return any(marker in value for marker in _MARKERS)
    if isinstance(value, list | tuple | set):
        return any(is_template(item) for item in value)
    if isinstance(value, dict):
        return any(is_template(item) for item in value.values())
    return False


class Renderer:
    """Renders the template fields of one task with one context.

    Args:
        task: the task whose fields are rendered.
        context: the task's runtime context (see ``get_current_context``); the
            template context adds ``ds``, ``ts``, ``ti``, ``var``, ``conn``, ``macros``...
    """

    def __init__(self, task: Task, context: dict[str, Any]):
        self.task = task
        self.context = context
        #: Values a log must hide: Connection passwords and sensitive Variables read.
        self.secrets: set[str] = set()
        self._environment: Any = None

    def render_fields(self) -> dict[str, Any]:
        """Render each template field in place on the task; the rendered fields, by name
        (only those that held a template or a template file)."""
        rendered: dict[str, Any] = {}
        for field in template_fields(self.task):
            value = getattr(self.task, field, None)
            if not (is_template(value) or self._template_file(value) is not None):
                continue
            value = self.render(value, field)
            setattr(self.task, field, value)
            rendered[field] = value
        return rendered

    def render(self, value: Any, field: str) -> Any:
        """``value`` with every string in it rendered; TemplateError naming ``field``."""
        try:
            return self._render(value, field)
        except TemplateError:
            raise
        except Exception as error:  # noqa: BLE001 - any error a template raises
            raise TemplateError(self._describe(error, field)) from None

    def shown(self, value: Any) -> str:
        """``value`` as the try's log shows it: secrets it read replaced by ``***``."""
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        for secret in sorted(self.secrets, key=len, reverse=True):
            if len(secret) >= _MIN_MASKED:
                text = text.replace(secret, "***")
        return text

    # -- rendering ------------------------------------------------------------------

    def _render(self, value: Any, field: str) -> Any:
        from spawnflow.sdk.tasks import XComArg

        if isinstance(value, str):
            path = self._template_file(value)
            if path is not None:
                return self._template(path.read_text(encoding="utf-8"), field, path.name)
            return self._template(value, field) if is_template(value) else value
        if isinstance(value, XComArg):
            return value  # pulled by the runner: a value another task pushed is data
        if isinstance(value, list):
            return [self._render(item, field) for item in value]
        if isinstance(value, tuple):
            return tuple(self._render(item, field) for item in value)
        if isinstance(value, dict):
            return {key: self._render(item, field) for key, item in value.items()}
        return value

    def _template(self, source: str, field: str, name: str | None = None) -> str:
        import jinja2

        environment = self._jinja()
        try:
            template = environment.from_string(source)
            return template.render(self._template_context())
        except jinja2.TemplateSyntaxError as error:
            where = f"{name}, line {error.lineno}" if name else f"line {error.lineno}"
            raise TemplateError(
                f"the template in field {field!r} of task {self._task_id()!r} is not valid "
                f"Jinja2 ({where}): {error.message}"
            ) from None

    def _template_file(self, value: Any) -> Path | None:
        """The file next to the Dag file that ``value`` names, for a field of a task
        kind with ``template_ext`` (``"report.sh"``): its content is the template. A
        name that is no such file is an ordinary string (a command on the PATH)."""
        extensions = tuple(getattr(self.task, "template_ext", ()))
        if not (isinstance(value, str) and extensions):
            return None
        name = value.strip()
        if not name.endswith(extensions) or any(space in name for space in " \t\n"):
            return None
        dag_file = getattr(getattr(self.task, "dag", None), "fileloc", None)
        if not dag_file:
            return None
        path = Path(dag_file).parent / name
        return path if path.is_file() else None

    def _jinja(self) -> Any:
        if self._environment is None:
            from jinja2.sandbox import SandboxedEnvironment

            self._environment = SandboxedEnvironment(
                undefined=_strict_undefined(),
                keep_trailing_newline=True,  # a rendered command keeps its last newline
                autoescape=False,  # shell commands and paths, not HTML
            )
        return self._environment

    def _task_id(self) -> str:
        return getattr(self.task, "task_id", "?")

    def _describe(self, error: Exception, field: str) -> str:
        import jinja2

        where = f"the template in field {field!r} of task {self._task_id()!r}"
        if isinstance(error, jinja2.UndefinedError):
            return f"{where} uses {error.message}"
        if isinstance(error, jinja2.exceptions.SecurityError):
            return f"{where} is not allowed by the sandbox: {error}"
        if isinstance(error, _Missing):
            return f"{where} reads {error.args[0]}"
        return f"{where} raised {type(error).__name__}: {error}"

    # -- the context ----------------------------------------------------------------

    def _template_context(self) -> dict[str, Any]:
        context = self.context
        logical = context.get("logical_date")
        dag_id, task_id, run_id = context["dag_id"], context["task_id"], context["run_id"]
        params = _Named("params", context.get("params") or {})
        values = {
            **context,
            "dag": getattr(self.task, "dag", None),
            "task": self.task,
            "params": params,
            "ti": TaskInstanceView(dag_id, task_id, run_id, context.get("try_number", 1)),
            "dag_run": SimpleNamespace(
                dag_id=dag_id,
                run_id=run_id,
                logical_date=logical,
                conf=_Named("dag_run.conf", context.get("conf") or {}),
                data_interval_start=context.get("data_interval_start"),
                data_interval_end=context.get("data_interval_end"),
            ),
            "var": SimpleNamespace(
                value=_Variables(self._variable, parse=False),
                json=_Variables(self._variable, parse=True),
            ),
            "conn": _Connections(self._connection),
            "macros": MACROS,
        }
        if isinstance(logical, dt.datetime):
            values.update(
                ds=logical.strftime("%Y-%m-%d"), ds_nodash=logical.strftime("%Y%m%d"),
                ts=logical.isoformat(), ts_nodash=logical.strftime("%Y%m%dT%H%M%S"),
            )  # fmt: skip
        return values

    def _variable(self, key: str) -> str | None:
        from spawnflow.sdk.runtime import Variable

        value = Variable.get(key, None)
        if value is not None and _SENSITIVE.search(key):
            self.secrets.add(value)
        return value

    def _connection(self, conn_id: str) -> Any:
        from spawnflow.sdk.connections import Connection

        try:
            connection = Connection.get(conn_id)
        except KeyError:
            raise _Missing(f"Connection {conn_id!r}, and there is none") from None
        if connection.password:
            self.secrets.add(connection.password)
        return connection


class _Missing(LookupError):
    """A Variable or Connection a template reads that does not exist."""


class _Named(dict):
    """A dict that names itself when a template reads a key it lacks."""

    def __init__(self, name: str, values: dict[str, Any]):
        super().__init__(values)
        self.template_name = name


class _Variables:
    """``var.value.KEY`` (the string) and ``var.json.KEY`` (the parsed JSON); ``.get(KEY,
    default)`` for one that may be missing."""

    def __init__(self, read: Callable[[str], str | None], *, parse: bool):
        self._read, self._parse = read, parse

    def get(self, key: str, default: Any = None) -> Any:
        value = self._read(key)
        if value is None:
            return default
        return self._decode(key, value) if self._parse else value

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        value = self._read(key)
        if value is None:
            raise _Missing(f"Variable {key!r}, and there is none (spawnflow variables set)")
        return self._decode(key, value) if self._parse else value

    def __getitem__(self, key: str) -> Any:
        return self.__getattr__(key)

    @staticmethod
    def _decode(key: str, value: str) -> Any:
        try:
            return json.loads(value)
        except ValueError as error:
            raise _Missing(f"Variable {key!r} as JSON, but it is not JSON: {error}") from None


class _Connections:
    """``conn.ID``: the Connection ``ID`` (``conn.ID.host``, ``.login``, ``.extra``...)."""

    def __init__(self, read: Callable[[str], Any]):
        self._read = read

    def get(self, conn_id: str) -> Any:
        return self._read(conn_id)

    def __getattr__(self, conn_id: str) -> Any:
        if conn_id.startswith("_"):
            raise AttributeError(conn_id)
        return self._read(conn_id)

    def __getitem__(self, conn_id: str) -> Any:
        return self._read(conn_id)


class TaskInstanceView:
    """``ti`` in a template: the running try, and ``ti.xcom_pull(task_ids=..., key=...)``
    through the task's supervisor (the same path as the ``xcom_pull`` of task code)."""

    def __init__(self, dag_id: str, task_id: str, run_id: str, try_number: int):
        self.dag_id, self.task_id, self.run_id = dag_id, task_id, run_id
        self.try_number = try_number

    def xcom_pull(
        self, task_ids: str | list[str] | None = None, key: str = "return_value",
        default: Any = None,
    ) -> Any:  # fmt: skip
        """What ``task_ids`` (one id, or a list: a list of values; None: this task)
        pushed under ``key`` in this run; ``default`` where nothing was pushed."""
        from spawnflow.sdk.runtime import xcom_pull

        def pull(task_id: str) -> Any:
            value = xcom_pull(task_id, key)
            return default if value is None else value

        if task_ids is None:
            return pull(self.task_id)
        if isinstance(task_ids, str):
            return pull(task_ids)
        return [pull(task_id) for task_id in task_ids]

    def __repr__(self) -> str:
        return f"<TaskInstance {self.dag_id}.{self.task_id} {self.run_id} try {self.try_number}>"


def ds_add(ds: str, days: int) -> str:
    """``ds`` (YYYY-MM-DD) moved by ``days`` days: ``macros.ds_add('2026-01-31', 1)``."""
    return (dt.date.fromisoformat(ds) + dt.timedelta(days=days)).isoformat()


def ds_format(ds: str, input_format: str, output_format: str) -> str:
    """``ds`` read with ``input_format`` and written with ``output_format`` (strftime)."""
    return dt.datetime.strptime(ds, input_format).strftime(output_format)


#: ``macros`` in a template, as in Airflow (its common part).
MACROS = SimpleNamespace(
    ds_add=ds_add, ds_format=ds_format, datetime=dt.datetime, timedelta=dt.timedelta,
    date=dt.date, json=SimpleNamespace(dumps=json.dumps, loads=json.loads),
)  # fmt: skip


def _strict_undefined() -> type:
    """Jinja2's StrictUndefined, saying which object lacks which name."""
    import jinja2
    from jinja2.utils import missing

    class Undefined(jinja2.StrictUndefined):
        @property
        def _undefined_message(self) -> str:
            if self._undefined_hint:
                return self._undefined_hint
            name = self._undefined_name
            if self._undefined_obj is missing:
                return f"{name!r}, which is undefined"
            owner = getattr(self._undefined_obj, "template_name", None)
            owner = owner or f"a {type(self._undefined_obj).__name__}"
            return f"{owner}.{name}, which is undefined ({owner} has no {name!r})"

    return Undefined
