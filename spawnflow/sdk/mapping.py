"""Dynamic task mapping: one task instance per element of a list, as Airflow's.

A ``@task`` function called through ``expand`` becomes a *mapped* task::

    @task
    def add(x, y):
        return x + y

    add.expand(x=[1, 2, 3])                    # three instances: x=1, x=2, x=3
    add.partial(y=10).expand(x=numbers())      # over an upstream task's list output
    add.expand_kwargs([{"x": 1, "y": 2}, {"x": 3, "y": 4}])

The scheduler expands a mapped task once its upstream tasks are done: one task
instance per element, with map index 0..n-1 (an unmapped task's is -1); an empty list
skips it. A task downstream of a mapped task that takes its output receives the list of
the instances' results, in map-index order.

Expanding over several arguments (``expand(x=[1, 2], y=[3, 4])``) makes their cross
product, the last argument varying fastest, as Airflow's. What the scheduler needs of the
expansion is in the serialized task (:func:`expand_json`); the task process finds the
element's values from the Dag file it imports (:func:`element_kwargs`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from spawnflow.sdk.tasks import (
    DagDefinitionError,
    Task,
    XComArg,
    set_task_function,
    set_task_partial,
    to_json,
)

EXPAND = "expand"
EXPAND_KWARGS = "expand_kwargs"


class ExpandInput:
    """What a mapped task is expanded over: ``mapped`` (argument name to a list or an
    upstream task's output) for ``expand``, or ``kwargs_list`` (a list of dicts or an
    upstream task's output) for ``expand_kwargs``."""

    def __init__(
        self,
        kind: str,
        mapped: dict[str, Sequence[Any] | XComArg] | None = None,
        kwargs_list: Sequence[dict[str, Any]] | XComArg | None = None,
        attributes: bool = False,
    ):
        self.kind = kind
        self.mapped = dict(mapped or {})
        self.kwargs_list = kwargs_list
        #: Each element sets attributes of a task class's instance (``TaskPartial``)
        #: rather than giving a ``@task`` function its arguments.
        self.attributes = attributes

    def sources(self) -> list[XComArg]:
        """The upstream outputs the expansion needs."""
        if self.kind == EXPAND:
            return [value for value in self.mapped.values() if isinstance(value, XComArg)]
        return [self.kwargs_list] if isinstance(self.kwargs_list, XComArg) else []

    def to_json(self, convert: Callable[[Any], Any] = to_json) -> dict[str, Any]:
        """The serialized form; with ``convert`` that keeps values, the form
        :func:`elements` reads in the task process, literal values unconverted."""
        found: dict[str, Any] = (
            {"kind": EXPAND, "mapped": {k: convert(v) for k, v in self.mapped.items()}}
            if self.kind == EXPAND
            else {"kind": EXPAND_KWARGS, "value": convert(self.kwargs_list)}
        )
        if self.attributes:
            found["attributes"] = True
        return found


class TaskFunction:
    """A ``@task`` function: calling it inside a Dag creates the task and returns its
    output; ``partial``, ``expand`` and ``expand_kwargs`` create a mapped task."""

    def __init__(self, factory: Callable[..., Task], function: Callable[..., Any],
                 settings: dict[str, Any], free_id: Callable[[str], str]):  # fmt: skip
        self._factory, self._function = factory, function
        self._settings, self._free_id = settings, free_id
        self.__name__ = function.__name__
        self.__qualname__ = getattr(function, "__qualname__", function.__name__)
        self.__doc__ = function.__doc__
        self.__wrapped__ = function

    def __repr__(self) -> str:
        return f"<task function {self.__qualname__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> XComArg:
        return self._create(args, kwargs).output

    def partial(self, **fixed: Any) -> Partial:
        """The arguments every mapped instance gets; then call ``expand`` or
        ``expand_kwargs`` on the result. Task options (``retries=``, ``pool=``,
        ``max_active_tis_per_dag=``...) are not arguments: give them to ``@task(...)``."""
        return Partial(self, fixed)

    def expand(self, **mapped: Any) -> XComArg:
        """A mapped task, one instance per element (see :meth:`Partial.expand`)."""
        return Partial(self, {}).expand(**mapped)

    def expand_kwargs(self, kwargs_list: Any) -> XComArg:
        """A mapped task, one instance per dict (see :meth:`Partial.expand_kwargs`)."""
        return Partial(self, {}).expand_kwargs(kwargs_list)

    def _create(self, args: Sequence[Any], kwargs: dict[str, Any],
                expand_input: ExpandInput | None = None) -> Task:  # fmt: skip
        task_id = self._settings.get("task_id") or self._free_id(self._function.__name__)
        rest = {k: v for k, v in self._settings.items() if k != "task_id"}
        created = self._factory(task_id, self._function, op_args=args, op_kwargs=kwargs, **rest)
        if expand_input is not None:
            created.expand_input = expand_input
            for source in expand_input.sources():
                created.set_upstream(source.task)
        return created


set_task_function(TaskFunction)


class Partial:
    """A ``@task`` function with some arguments fixed, waiting for ``expand`` or
    ``expand_kwargs``."""

    def __init__(self, function: TaskFunction, fixed: dict[str, Any]):
        self._function, self._fixed = function, dict(fixed)

    def expand(self, **mapped: Any) -> XComArg:
        """Create the mapped task: each keyword argument is a list (or tuple) or an
        upstream task's output that will be a list; one instance per element (the cross
        product, for several). Returns the task's output, which a downstream task
        receives as the list of the instances' results.

        Raises:
            DagDefinitionError: no argument, an argument also given to ``partial``, or a
                value that is neither a list nor a task's output.
        """
        expand_input = _expand_input(self._function.__name__, self._fixed, mapped)
        return self._function._create((), self._fixed, expand_input).output

    def expand_kwargs(self, kwargs_list: Any) -> XComArg:
        """Create the mapped task: one instance per dict of keyword arguments in
        ``kwargs_list`` (a list of dicts, or an upstream task's output that will be one).

        Raises:
            DagDefinitionError: a value that is neither a list of dicts with string keys
                nor a task's output.
        """
        expand_input = _expand_kwargs_input(self._function.__name__, kwargs_list)
        return self._function._create((), self._fixed, expand_input).output


class TaskPartial:
    """A task class with some arguments fixed, ``task_id`` among them, waiting for
    ``expand`` or ``expand_kwargs``: Airflow's mapping of classic operators, as in
    ``CommandTask.partial(task_id="greet").expand(command=["echo hi", "echo ho"])``.
    Only the arguments the class lists in ``mappable`` can be mapped; each instance's
    task process sets its element's values as the task's attributes before rendering
    its templates (:meth:`spawnflow.sdk.tasks.Task.take_mapped`)."""

    def __init__(self, task_class: type[Task], fixed: dict[str, Any]):
        self._class, self._fixed = task_class, dict(fixed)
        name = task_class.__name__
        if not isinstance(self._fixed.get("task_id"), str):
            raise _error(name, f"{name}.partial() needs task_id=, the mapped task's id")
        if not task_class.mappable:
            raise _error(name, f"{name} cannot be mapped; map a @task function instead")

    def expand(self, **mapped: Any) -> XComArg:
        """The mapped task, one instance per element (the cross product, for several
        arguments), over arguments the class lists in ``mappable``."""
        name = self._fixed["task_id"]
        unknown = sorted(set(mapped) - set(self._class.mappable))
        if unknown:
            raise _error(name, f"{self._class.__name__} cannot map {unknown[0]!r}; it maps "
                               + ", ".join(self._class.mappable))  # fmt: skip
        expand_input = _expand_input(name, self._fixed, mapped, attributes=True)
        return self._create(expand_input)

    def expand_kwargs(self, kwargs_list: Any) -> XComArg:
        """The mapped task, one instance per dict of mapped arguments."""
        expand_input = _expand_kwargs_input(self._fixed["task_id"], kwargs_list, attributes=True)
        return self._create(expand_input)

    def _create(self, expand_input: ExpandInput) -> XComArg:
        stand_ins = {k: v for k, v in self._class.mappable.items() if k not in self._fixed}
        created = self._class(**{**stand_ins, **self._fixed})
        created.expand_input = expand_input
        for source in expand_input.sources():
            created.set_upstream(source.task)
        return created.output


set_task_partial(TaskPartial)


def _expand_input(name: str, fixed: dict[str, Any], mapped: dict[str, Any],
                  attributes: bool = False) -> ExpandInput:  # fmt: skip
    """``expand(**mapped)``'s input, checked: DagDefinitionError naming the task."""
    if not mapped:
        raise _error(name, "expand() needs at least one keyword argument to map over")
    for key, value in mapped.items():
        if key in fixed:
            raise _error(name, f"argument {key!r} is given to both partial() and expand()")
        if not isinstance(value, XComArg | list | tuple):
            raise _error(
                name,
                f"expand() argument {key!r} must be a list or a task's output, "
                f"not {type(value).__name__} {value!r}",
            )
    mapped = {k: v if isinstance(v, XComArg) else list(v) for k, v in mapped.items()}
    return ExpandInput(EXPAND, mapped=mapped, attributes=attributes)


def _expand_kwargs_input(name: str, kwargs_list: Any, attributes: bool = False) -> ExpandInput:
    """``expand_kwargs(kwargs_list)``'s input, checked: DagDefinitionError naming the task."""
    if not isinstance(kwargs_list, XComArg):
        if not isinstance(kwargs_list, list | tuple) or not all(
            isinstance(item, dict) and all(isinstance(key, str) for key in item)
            for item in kwargs_list
        ):
            raise _error(
                name,
                "expand_kwargs() takes a list of dicts of keyword arguments or a "
                f"task's output, not {type(kwargs_list).__name__} {kwargs_list!r}",
            )
        kwargs_list = [dict(item) for item in kwargs_list]
    return ExpandInput(EXPAND_KWARGS, kwargs_list=kwargs_list, attributes=attributes)


def expand_json(task: Task) -> dict[str, Any] | None:
    """The serialized task's ``expand`` field: None for an unmapped task."""
    expand_input: ExpandInput | None = getattr(task, "expand_input", None)
    return None if expand_input is None else expand_input.to_json()


def elements(expand: dict[str, Any], values: dict[str, Any]) -> list[dict[str, Any]]:
    """Each instance's keyword arguments, in map-index order.

    ``expand`` is a serialized task's ``expand`` field; ``values`` holds, for each upstream
    output it refers to (by ``"task_id"`` or ``"task_id.key"``... see :func:`source_key`),
    the value that task pushed. Raises ValueError, in one sentence naming the argument and
    what it got, for a value that is not a list (or, for ``expand_kwargs``, not a list of
    dicts).
    """
    if expand["kind"] == EXPAND:
        names, lists = [], []
        for name, spec in expand["mapped"].items():
            value = values[source_key(spec)] if _is_reference(spec) else spec
            if not isinstance(value, list | tuple):
                raise ValueError(
                    f"expand() argument {name!r} must be a list, but "
                    f"{_described(spec)} is {type(value).__name__} {_short(value)}"
                )
            names.append(name)
            lists.append(list(value))
        return [
            dict(zip(names, combination, strict=True)) for combination in itertools.product(*lists)
        ]
    spec = expand["value"]
    value = values[source_key(spec)] if _is_reference(spec) else spec
    if not isinstance(value, list | tuple) or not all(
        isinstance(item, dict) and all(isinstance(key, str) for key in item) for item in value
    ):
        raise ValueError(
            f"expand_kwargs() needs a list of dicts, but {_described(spec)} is "
            f"{type(value).__name__} {_short(value)}"
        )
    return [dict(item) for item in value]


def references(expand: dict[str, Any]) -> list[dict[str, str]]:
    """The upstream outputs (``{"__xcom__": task_id, "key": key}``) an expansion needs."""
    specs = list(expand["mapped"].values()) if expand["kind"] == EXPAND else [expand["value"]]
    return [spec for spec in specs if _is_reference(spec)]


def source_key(reference: dict[str, str]) -> str:
    """How :func:`elements` finds a reference's value in ``values``: ``task_id`` for a
    return value, ``task_id.key`` for another key."""
    key = reference.get("key", "return_value")
    return reference["__xcom__"] if key == "return_value" else f"{reference['__xcom__']}.{key}"


def element_kwargs(task: Task, map_index: int, resolve: Callable[[XComArg], Any]) -> dict[str, Any]:
    """In the task process: the keyword arguments of instance ``map_index`` of a mapped
    task, its upstream outputs read with ``resolve``. ValueError as :func:`elements`,
    and IndexError for a map index the list no longer has."""
    expand_input: ExpandInput = task.expand_input  # type: ignore[attr-defined]
    values = {source_key(source.to_json()): resolve(source) for source in expand_input.sources()}
    found = elements(expand_input.to_json(_references_only), values)
    if not 0 <= map_index < len(found):
        raise IndexError(
            f"mapped task {task.task_id!r} has {len(found)} elements now, none at map index "
            f"{map_index}"
        )
    return found[map_index]


def _references_only(value: Any) -> Any:
    return value.to_json() if isinstance(value, XComArg) else value


def _is_reference(spec: Any) -> bool:
    return isinstance(spec, dict) and "__xcom__" in spec


def _described(spec: Any) -> str:
    if _is_reference(spec):
        key = spec.get("key", "return_value")
        return f"the output of task {spec['__xcom__']!r}" + (
            "" if key == "return_value" else f" (key {key!r})"
        )
    return "the value given"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _error(function_name: str, problem: str) -> DagDefinitionError:
    from spawnflow.sdk.building import current_dag

    dag = current_dag()
    if dag is None:
        return DagDefinitionError(f"task {function_name!r}: {problem}")
    return dag.definition_error(problem, function_name)
