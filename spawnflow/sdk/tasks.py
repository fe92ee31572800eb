"""Tasks: Python callables (``@task``), shell commands (``CommandTask``), dependencies.

A task belongs to one Dag. ``a >> b`` makes ``b`` run after ``a``; lists work on
either side (``a >> [b, c] >> d``). Calling a ``@task`` function inside a Dag
creates the task and returns its output (an :class:`XComArg`); passing that output
to another task creates the dependency and, at run time, pulls the value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from spawnflow.sdk.assets import Asset
from spawnflow.sdk.callbacks import TASK_CALLBACKS, Callback, callback_list
from spawnflow.sdk.names import check_id

if TYPE_CHECKING:
    from spawnflow.sdk.dags import Dag
    from spawnflow.sdk.groups import TaskGroup

RETURN_VALUE = "return_value"


class TriggerRule(StrEnum):
    """When a task runs, given how its upstream tasks ended (Airflow's names)."""

    ALL_SUCCESS = "all_success"
    ALL_DONE = "all_done"
    ALL_FAILED = "all_failed"
    ONE_SUCCESS = "one_success"
    ONE_FAILED = "one_failed"
    NONE_FAILED = "none_failed"
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    NONE_SKIPPED = "none_skipped"
    ALL_SKIPPED = "all_skipped"
    ALWAYS = "always"


class WeightRule(StrEnum):
    """How a task's effective priority weight is made from its own (Airflow's names)."""

    DOWNSTREAM = "downstream"
    UPSTREAM = "upstream"
    ABSOLUTE = "absolute"


class DagDefinitionError(Exception):
    """A Dag or task that cannot be built as written; the message names file, Dag and task."""


class Linked:
    """``>>`` and ``<<`` between tasks, task groups and lists of them, in terms of the
    class's ``set_downstream`` and ``set_upstream``."""

    def set_downstream(self, other: Any) -> None:
        raise NotImplementedError

    def set_upstream(self, other: Any) -> None:
        raise NotImplementedError

    def __rshift__(self, other):
        self.set_downstream(other)
        return other

    def __lshift__(self, other):
        self.set_upstream(other)
        return other

    def __rrshift__(self, other):  # [a, b] >> self
        self.set_upstream(other)
        return self

    def __rlshift__(self, other):  # [a, b] << self
        self.set_downstream(other)
        return self


class Task(Linked):
    """Base of every task kind. ``kind`` names it in the serialized Dag.

    Every kind takes these keyword arguments: ``dag``, ``retries``, ``retry_delay``,
    ``retry_exponential_backoff``, ``max_retry_delay``, ``execution_timeout``,
    ``trigger_rule``, ``queue`` (the Celery executor's queue), the callbacks,
    ``pool`` (the pool whose slots a try takes; ``default_pool``), ``pool_slots`` (how
    many; 1), ``priority_weight`` (1) and ``weight_rule`` (``downstream``: the task's
    weight plus every downstream task's, ``upstream``: plus every upstream task's,
    ``absolute``: its own), ``max_active_tis_per_dag`` (how many of its task
    instances may run at once over all runs of the Dag, mapped ones included; None: no
    bound), each defaulting to the Dag's ``default_args``; and ``outlets``, the
    :class:`~spawnflow.sdk.assets.Asset` list the task updates.

    A ``@task`` function's ``partial``, ``expand`` and ``expand_kwargs`` make a mapped
    task (see :mod:`spawnflow.sdk.mapping`); its ``expand_input`` says over what. A task
    class maps over the arguments it lists in ``mappable``:
    ``CommandTask.partial(task_id="greet").expand(command=[...])``.

    Retries: a failed try is tried again ``retries`` times, ``retry_delay`` (a
    timedelta or seconds; 5 minutes by default) after it ended. With
    ``retry_exponential_backoff=True`` the wait doubles with each try, with a jitter,
    as Airflow's: between ``retry_delay * 2 ** (try_number - 1)`` and twice that, at
    most ``max_retry_delay`` (a timedelta or seconds; a day if None). See
    :func:`spawnflow.comms.retries.retry_wait`.

    Callbacks (a function of the context, or a list of them), run in the task
    process: ``on_execute_callback`` before the task's code, ``on_success_callback``
    after it succeeded, ``on_retry_callback`` after a failed try that will be tried
    again, ``on_failure_callback`` after the last one failed. The context is the
    task's (:func:`~spawnflow.sdk.runtime.get_current_context`) plus ``exception``
    (None on success) and ``reason``. A callback that raises is logged in the try's
    log and changes nothing. See :mod:`spawnflow.sdk.callbacks`.

    Raises:
        DagDefinitionError: for an argument of the wrong type or range.
    """

    kind = "task"
    #: Attributes that are Jinja2 templates, rendered in the task process before the
    #: task runs (see :mod:`spawnflow.sdk.templates`); a task class of your own names its.
    template_fields: Sequence[str] = ()
    #: A template field naming a file with one of these endings, next to the Dag file,
    #: is rendered from that file's content.
    template_ext: Sequence[str] = ()
    #: The arguments ``partial(...).expand(...)`` may map this class over (each
    #: instance's value becomes the attribute of that name in its task process), with
    #: the stand-in the task is built with. None here: map ``@task`` functions instead.
    mappable: dict[str, Any] = {}

    def __init__(
        self,
        task_id: str,
        *,
        dag: Dag | None = None,
        retries: int | None = None,
        retry_delay: dt.timedelta | float | None = None,
        retry_exponential_backoff: bool | None = None,
        max_retry_delay: dt.timedelta | float | None = None,
        execution_timeout: dt.timedelta | None = None,
        trigger_rule: str | TriggerRule | None = None,
        outlets: Sequence[Asset] | None = None,
        queue: str | None = None,
        on_execute_callback: Callback | list[Callback] | None = None,
        on_success_callback: Callback | list[Callback] | None = None,
        on_retry_callback: Callback | list[Callback] | None = None,
        on_failure_callback: Callback | list[Callback] | None = None,
        pool: str | None = None,
        pool_slots: int | None = None,
        priority_weight: int | None = None,
        weight_rule: str | WeightRule | None = None,
        max_active_tis_per_dag: int | None = None,
    ):
        from spawnflow.sdk.building import current_dag, current_group

        dag = dag or current_dag()
        if dag is None:
            raise DagDefinitionError(
                f"task {task_id!r} was created outside a Dag: create it inside `with Dag(...)`, "
                "inside a @dag function, or pass dag=..."
            )
        self.dag: Dag = dag
        defaults = self.dag.default_args
        try:
            self.task_id = check_id(task_id, "task id")
            group = current_group()
            if group is not None and group.dag is not self.dag:
                group = None  # a task of another Dag, created inside a group's block
            #: The innermost task group it was created in (spawnflow.sdk.groups), if any.
            self.task_group: TaskGroup | None = group
            if self.task_group is not None:
                self.task_id = self.task_group.child_id(self.task_id)
            self.retries = _non_negative_int(_pick(retries, defaults, "retries", 0), "retries")
            self.retry_delay = _timedelta(
                _pick(retry_delay, defaults, "retry_delay", dt.timedelta(minutes=5)), "retry_delay"
            )
            backoff = _pick(retry_exponential_backoff, defaults, "retry_exponential_backoff", False)
            if not isinstance(backoff, bool):
                raise ValueError(f"retry_exponential_backoff {backoff!r} must be True or False")
            self.retry_exponential_backoff: bool = backoff
            cap = _pick(max_retry_delay, defaults, "max_retry_delay", None)
            self.max_retry_delay = None if cap is None else _timedelta(cap, "max_retry_delay")
            given = {
                "on_execute_callback": on_execute_callback,
                "on_success_callback": on_success_callback,
                "on_retry_callback": on_retry_callback,
                "on_failure_callback": on_failure_callback,
            }
            #: Each callback's functions, by argument name (only those it has).
            self.callbacks: dict[str, list[Callback]] = {
                name: found for name in TASK_CALLBACKS
                if (found := callback_list(_pick(given[name], defaults, name, None), name))
            }  # fmt: skip
            timeout = _pick(execution_timeout, defaults, "execution_timeout", None)
            self.execution_timeout = (
                None if timeout is None else _timedelta(timeout, "execution_timeout")
            )
            self.trigger_rule = _trigger_rule(
                _pick(trigger_rule, defaults, "trigger_rule", TriggerRule.ALL_SUCCESS)
            )
            self.outlets: list[Asset] = _outlets(outlets)
            self.queue: str | None = _queue(_pick(queue, defaults, "queue", None))
            self.pool: str = _pool(_pick(pool, defaults, "pool", "default_pool"))
            self.pool_slots = _positive_int(
                _pick(pool_slots, defaults, "pool_slots", 1), "pool_slots"
            )
            self.priority_weight = _whole(
                _pick(priority_weight, defaults, "priority_weight", 1), "priority_weight"
            )
            self.weight_rule = _weight_rule(
                _pick(weight_rule, defaults, "weight_rule", WeightRule.DOWNSTREAM)
            )
            most = _pick(max_active_tis_per_dag, defaults, "max_active_tis_per_dag", None)
            self.max_active_tis_per_dag: int | None = (
                None if most is None else _positive_int(most, "max_active_tis_per_dag")
            )
        except ValueError as error:
            raise self.dag.definition_error(str(error), task_id=task_id) from None
        self.upstream_task_ids: set[str] = set()
        self.downstream_task_ids: set[str] = set()
        #: What a mapped task is expanded over (spawnflow.sdk.mapping.ExpandInput).
        self.expand_input: Any = None
        self.dag.add_task(self)
        if self.task_group is not None:
            self.task_group.add(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.task_id}>"

    @classmethod
    def partial(cls, **fixed: Any) -> Any:
        """The arguments every instance of a mapped task of this class shares, ``task_id``
        among them; then ``expand(...)`` or ``expand_kwargs(...)`` over the arguments the
        class lists in :attr:`mappable` (see :class:`spawnflow.sdk.mapping.TaskPartial`)."""
        return _task_partial[0](cls, fixed)

    def take_mapped(self, values: dict[str, Any]) -> None:
        """In the task process of a mapped instance: its element's ``values``, set as
        attributes. ValueError, in one sentence, for one this class does not map or of
        the wrong kind."""
        for name, value in values.items():
            if name not in self.mappable:
                known = ", ".join(self.mappable) or "nothing"
                raise ValueError(
                    f"{type(self).__name__} {self.task_id!r} cannot map {name!r}; it maps {known}"
                )
            setattr(self, name, value)

    # -- dependencies ---------------------------------------------------------------

    def set_downstream(self, other: Task | XComArg | Sequence[Task | XComArg]) -> None:
        for task in _tasks(other, of=self, roots=True):
            self.dag.add_dependency(self, task)

    def set_upstream(self, other: Task | XComArg | Sequence[Task | XComArg]) -> None:
        for task in _tasks(other, of=self, roots=False):
            self.dag.add_dependency(task, self)

    @property
    def output(self) -> XComArg:
        """This task's return value, as an argument for another task."""
        return XComArg(self)

    # -- serialization --------------------------------------------------------------

    def arguments(self) -> dict[str, Any]:
        """What this kind of task was configured with, as JSON-ready data."""
        return {}

    def _take_arguments(self, op_args: Sequence, op_kwargs: dict[str, Any] | None) -> None:
        """Keep the call's arguments; an upstream task's output among them is a dependency."""
        self.op_args = tuple(op_args)
        self.op_kwargs = dict(op_kwargs or {})
        for upstream in xcom_args(self.op_args, self.op_kwargs):
            self.set_upstream(upstream.task)

    def _arguments_json(self) -> dict[str, Any]:
        return {
            "op_args": [to_json(value) for value in self.op_args],
            "op_kwargs": {key: to_json(value) for key, value in self.op_kwargs.items()},
        }


class XComArg:
    """A reference to a value a task pushes (its return value by default)."""

    def __init__(self, task: Task, key: str = RETURN_VALUE):
        self.task, self.key = task, key

    def __repr__(self) -> str:
        return f"XComArg({self.task.task_id!r}, {self.key!r})"

    def __rshift__(self, other):
        return self.task >> other

    def __lshift__(self, other):
        return self.task << other

    def __rrshift__(self, other):
        return self.task.__rrshift__(other)

    def __rlshift__(self, other):
        return self.task.__rlshift__(other)

    def __getitem__(self, key: str) -> XComArg:
        return XComArg(self.task, key)

    def to_json(self) -> dict[str, str]:
        return {"__xcom__": self.task.task_id, "key": self.key}


class PythonTask(Task):
    """Runs a Python callable; its return value becomes the task's XCom.

    ``templates_dict``: Jinja2 templates rendered when the task runs, given to the
    callable as its ``templates_dict`` argument if it has one (and in the context).
    Strings among its arguments are templates too.
    """

    kind = "python"
    template_fields = ("templates_dict", "op_args", "op_kwargs")

    def __init__(self, task_id: str, python_callable: Callable[..., Any], *, op_args: Sequence = (),
                 op_kwargs: dict[str, Any] | None = None,
                 templates_dict: dict[str, Any] | None = None, **kwargs: Any):  # fmt: skip
        if not callable(python_callable):
            raise _definition_error(kwargs, task_id, "python_callable must be callable")
        self.python_callable = python_callable
        self.templates_dict = dict(templates_dict) if templates_dict else None
        super().__init__(task_id, **kwargs)
        self._take_arguments(op_args, op_kwargs)

    def arguments(self) -> dict[str, Any]:
        found = {"callable": _name_of(self.python_callable), **self._arguments_json()}
        if self.templates_dict:
            found["templates_dict"] = to_json(self.templates_dict)
        return found


class CommandTask(Task):
    """Runs a shell command; the last line it prints becomes the task's XCom.

    ``command`` is a string, or a callable (``@task.command``) that returns the
    string at run time from the arguments it was given. The command (also the one a
    callable returns), ``env`` and ``cwd`` are Jinja2 templates; a command that names a
    ``.sh`` or ``.bash`` file next to the Dag file is rendered from that file.
    """

    kind = "command"
    template_fields = ("command", "env", "cwd")
    template_ext = (".sh", ".bash")
    #: The command a mapped instance is built with is never run: its element's is.
    mappable = {"command": "(set by each mapped instance)", "env": {}, "cwd": None}

    def __init__(self, task_id: str, command: str | Callable[..., str], *,
                 env: dict[str, str] | None = None, cwd: str | None = None,
                 op_args: Sequence = (), op_kwargs: dict[str, Any] | None = None,
                 **kwargs: Any):  # fmt: skip
        if not (isinstance(command, str) and command.strip()) and not callable(command):
            raise _definition_error(
                kwargs, task_id, "command must be a non-empty string or a callable"
            )
        self.command = command
        self.env = dict(env or {})
        self.cwd = cwd
        super().__init__(task_id, **kwargs)
        self._take_arguments(op_args, op_kwargs)

    def take_mapped(self, values: dict[str, Any]) -> None:
        super().take_mapped(values)
        if not (isinstance(self.command, str) and self.command.strip()):
            raise ValueError(f"the mapped command is {self.command!r}, not a non-empty string")
        if not isinstance(self.env, dict) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in self.env.items()
        ):
            raise ValueError(f"the mapped env is {self.env!r}, not a dict of strings")
        if self.cwd is not None and not isinstance(self.cwd, str):
            raise ValueError(f"the mapped cwd is {self.cwd!r}, not a string")

    def arguments(self) -> dict[str, Any]:
        command = self.command
        return {
            "command": command if isinstance(command, str) else None,
            "callable": None if isinstance(command, str) else _name_of(command),
            "env": dict(self.env),
            "cwd": self.cwd,
            **self._arguments_json(),
        }


# -- decorators -----------------------------------------------------------------------


#: Task kinds other SDK modules add to ``@task`` (``branch``, ``short_circuit``: see
#: :mod:`spawnflow.sdk.branching`), so that this module need not import them.
_decorator_kinds: dict[str, Callable[..., Task]] = {}


def add_decorator_kind(name: str, factory: Callable[..., Task]) -> None:
    """Make ``@task.<name>`` create tasks with ``factory(task_id, function, op_args=...,
    op_kwargs=..., **options)``."""
    _decorator_kinds[name] = factory


#: What ``@task`` makes of a function: spawnflow.sdk.mapping.TaskFunction (which adds
#: ``partial``/``expand``), set by that module so that this one need not import it.
_task_function: list[Callable[..., Any]] = []


def set_task_function(factory: Callable[..., Any]) -> None:
    """Make ``@task`` return ``factory(task_factory, function, settings, free_id)``."""
    _task_function[:] = [factory]


#: What ``Task.partial`` returns: spawnflow.sdk.mapping.TaskPartial, set by that module.
_task_partial: list[Callable[..., Any]] = []


def set_task_partial(factory: Callable[..., Any]) -> None:
    """Make ``TaskClass.partial(**fixed)`` return ``factory(TaskClass, fixed)``."""
    _task_partial[:] = [factory]


class _TaskDecorator:
    """``@task``, ``@task(retries=2)``, ``@task.command``, ``@task.branch`` and
    ``@task.short_circuit``."""

    def __init__(self, factory: Callable[..., Task] = PythonTask, **defaults: Any):
        self._factory, self._defaults = factory, defaults

    def __call__(self, function: Callable[..., Any] | None = None, **options: Any):
        if function is None:
            return _TaskDecorator(self._factory, **{**self._defaults, **options})
        settings = {**self._defaults, **options}
        return _task_function[0](self._factory, function, settings, _free_task_id)

    @property
    def command(self) -> _TaskDecorator:
        """Decorate a function that returns a shell command; the task runs that command."""
        return _TaskDecorator(CommandTask, **self._defaults)

    @property
    def branch(self) -> _TaskDecorator:
        """Decorate a function that returns the task id (or ids) to follow; the other
        tasks directly downstream are skipped."""
        return _TaskDecorator(_decorator_kinds["branch"], **self._defaults)

    @property
    def short_circuit(self) -> _TaskDecorator:
        """Decorate a function whose false return value skips the tasks downstream."""
        return _TaskDecorator(_decorator_kinds["short_circuit"], **self._defaults)


task = _TaskDecorator()


# -- helpers --------------------------------------------------------------------------


def xcom_args(args: Iterable[Any], kwargs: dict[str, Any]) -> list[XComArg]:
    """Every XComArg in the arguments, nested in lists, tuples and dicts too."""
    found: list[XComArg] = []

    def visit(value: Any) -> None:
        if isinstance(value, XComArg):
            found.append(value)
        elif isinstance(value, list | tuple | set):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)

    visit(list(args))
    visit(kwargs)
    return found


def to_json(value: Any) -> Any:
    """A JSON-ready, stable description of an argument.

    XComArgs become references; JSON types stay; sets are sorted; anything else is
    named by its type only. A repr would carry memory addresses or hash-dependent
    order, and the same Dag would serialize differently in every process.
    """
    if isinstance(value, XComArg):
        return value.to_json()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((to_json(item) for item in value), key=_stable_key)
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return {key: to_json(item) for key, item in value.items()}
        pairs = [[to_json(key), to_json(item)] for key, item in value.items()]
        return {"__pairs__": sorted(pairs, key=_stable_key)}
    kind = type(value)
    return {"__object__": f"{kind.__module__}.{kind.__qualname__}"}


def _stable_key(item: Any) -> str:
    import json

    return json.dumps(item, sort_keys=True)


def _free_task_id(name: str) -> str:
    """``name``, or ``name__1``, ``name__2``... when a @task function is called again."""
    from spawnflow.sdk.building import current_dag, current_group

    dag = current_dag()
    group = current_group()
    # Inside a task group the id that must be free is the prefixed one.
    full = group.child_id if group is not None and group.dag is dag else str
    if dag is None or full(name) not in dag.task_dict:
        return name
    # From where the last call left off: scanning from 1 made a Dag of N calls of one
    # @task take N^2/2 lookups (a third of a second at 800).
    number = dag.next_suffix.get(full(name), 1)
    while full(f"{name}__{number}") in dag.task_dict:
        number += 1
    dag.next_suffix[full(name)] = number + 1
    return f"{name}__{number}"


def _name_of(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{getattr(function, '__qualname__', repr(function))}"


def _definition_error(kwargs: dict[str, Any], task_id: str, problem: str) -> Exception:
    """A DagDefinitionError naming the Dag the task would belong to, if there is one."""
    from spawnflow.sdk.building import current_dag

    dag = kwargs.get("dag") or current_dag()
    if dag is None:
        return DagDefinitionError(f"task {task_id!r}: {problem}")
    return dag.definition_error(problem, task_id)


def _tasks(other: Any, of: Task | None = None, roots: bool = True) -> list[Task]:
    """The tasks in ``other``; a task group stands for its root tasks (``roots``: it is
    downstream) or its leaves (it is upstream)."""
    items = other if isinstance(other, list | tuple | set) else [other]
    tasks = []
    for item in items:
        if isinstance(item, XComArg):
            tasks.append(item.task)
        elif isinstance(item, Task):
            tasks.append(item)
        elif hasattr(item, "edge_tasks"):  # a TaskGroup (spawnflow.sdk.groups)
            tasks.extend(item.edge_tasks(roots=roots))
        elif of is not None:
            raise of.dag.definition_error(
                f"cannot set a dependency on {type(item).__name__} {item!r}: not a task",
                of.task_id,
            )
        else:
            raise TypeError(f"cannot set a dependency on {item!r}: not a task")
    return tasks


def _pick(value: Any, defaults: dict[str, Any], key: str, fallback: Any) -> Any:
    if value is not None:
        return value
    return defaults.get(key, fallback)


def _non_negative_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} {value!r} must be a whole number of at least 0")
    return value


def _timedelta(value: Any, what: str) -> dt.timedelta:
    given = value  # the message shows what the Dag file wrote, not its conversion
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = dt.timedelta(seconds=value)
    if not isinstance(value, dt.timedelta) or value < dt.timedelta(0):
        raise ValueError(f"{what} {given!r} must be a non-negative timedelta or number of seconds")
    return value


def _outlets(value: Any) -> list[Asset]:
    """The Assets, each URI once, in order."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise ValueError(f"outlets {value!r} must be a list of Assets")
    found: dict[str, Asset] = {}
    for item in value:
        if not isinstance(item, Asset):
            raise ValueError(f"outlets must be Assets, not {type(item).__name__} {item!r}")
        found.setdefault(item.uri, item)
    return list(found.values())


_Choice = TypeVar("_Choice", bound=StrEnum)


def _choice(kind: type[_Choice], value: Any, what: str) -> _Choice:
    """``kind(value)``, or a ValueError naming the argument and every allowed value."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(choice.value for choice in kind)
        raise ValueError(f"{what} {value!r} must be one of {allowed}") from None


def _trigger_rule(value: Any) -> TriggerRule:
    return _choice(TriggerRule, value, "trigger_rule")


def _pool(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 250:
        raise ValueError(f"pool must be a pool's name (1 to 250 characters), not {value!r}")
    return value


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} {value!r} must be a whole number of at least 1")
    return value


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} {value!r} must be a whole number")
    return value


def _weight_rule(value: Any) -> WeightRule:
    return _choice(WeightRule, value, "weight_rule")


def _queue(value: object) -> str | None:
    """A Celery queue's name: a word without spaces (None: ``[celery] default_queue``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise ValueError(f"queue must be a queue's name without spaces, not {value!r}")
    return value
