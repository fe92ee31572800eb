"""The task process (role ``task``): import the Dag file, find the task, run it.

Started by the task's supervisor (inside an executor worker) through the launcher.
It never opens the database and never imports SQLAlchemy: XComs and Variables are
requests to the supervisor. Its stdout and stderr are captured by the supervisor
into the try's log file. Its last message is a TaskOutcome; the task's callbacks run
after it (see :func:`_call_back`), within ``[core] callback_timeout``.
"""

from __future__ import annotations

import inspect
import locale
import os
import subprocess
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from spawnflow.bootstrap import lifecycle, logs
from spawnflow.bootstrap import settings as settings_module
from spawnflow.comms import state as state_messages
from spawnflow.comms.states import TaskState
from spawnflow.comms.tasks import (
    Deferral,
    ExecuteEnded,
    ExecuteStarting,
    TaskOutcome,
    TaskStarting,
    Workload,
    XComPull,
    XComPush,
)
from spawnflow.comms.templates import RenderedFields
from spawnflow.sdk import (
    branching,
    callbacks,
    loading,
    mapping,
    runtime,
    state,
    templates,
    xcom,
)
from spawnflow.sdk.names import defined_in_dag_file
from spawnflow.sdk.tasks import CommandTask, PythonTask, Task, XComArg
from spawnflow.sdk.triggers import TaskDeferred, classpath_of


class TaskFailed(Exception):
    """The task's own failure, with a reason for its task instance."""


class ExecutionTimeout(TaskFailed):
    """The task ran past a deadline its ``execution_timeout`` sets (its ``execute``, or
    what runs around it) and its supervisor stopped it: the ``exception`` in the
    context of the failure callbacks that follow."""


class TaskProcessDied(TaskFailed):
    """The task process ended before it reported how the try went (killed by the OS for
    memory, a crash in native code, ``os._exit``): the ``exception`` in the context of
    the failure callbacks that follow."""


#: What stopped a try that could not call its own failure callbacks: the exception
#: those callbacks get.
_CAUSES: dict[str, type[TaskFailed]] = {"timeout": ExecutionTimeout, "died": TaskProcessDied}


def _context(workload: Workload) -> dict[str, Any]:
    """The task's runtime context (``get_current_context``)."""
    return {
        "dag_id": workload.dag_id,
        "task_id": workload.task_id,
        "run_id": workload.run_id,
        "logical_date": workload.logical_date,
        "data_interval_start": workload.data_interval_start,
        "data_interval_end": workload.data_interval_end,
        "try_number": workload.try_number,
        "map_index": workload.map_index,
        "params": {**workload.params, **workload.conf},
        "conf": workload.conf,
        "partition_key": workload.partition_key,
        "triggering_asset_events": workload.triggering_asset_events,
        "task_state": state.StateStore(
            state_messages.TASK, (workload.dag_id, workload.run_id, workload.task_id),
            runtime.ask, lambda: state.load_backend(settings_module.current()),
        ),
    }  # fmt: skip


def _install_context(channel, workload: Workload) -> dict[str, Any]:
    """Make the try's context what get_current_context() returns in this process."""
    context = _context(workload)
    runtime.install(channel, context)
    return context


def run_task(channel, workload: Workload) -> None:
    """Run one try of one task and report how it ended."""
    context = _install_context(channel, workload)
    logger = logs.get_logger("spawnflow.task")
    resuming = workload.next_method is not None
    logger.info("task resumed" if resuming else "task started", task_id=workload.task_id,
                try_number=workload.try_number, method=workload.next_method)  # fmt: skip
    task: Task | None = None
    # Where the try is, for the supervisor's deadlines: only a timed task has any.
    phase = channel.send if workload.execution_timeout else _unheard
    try:
        if workload.multiprocessing_start_method is not None:
            # What the user's own processes get, as on an OS whose default it is.
            import multiprocessing

            multiprocessing.set_start_method(workload.multiprocessing_start_method, force=True)
        task = _find_task(workload)
        logs.adopt_structlog()  # a Dag file that logs through structlog: to the try's log
        phase(TaskStarting())
        _take_mapped(task, channel, workload.map_index)
        context["templates_dict"] = _render_templates(task, context)
        _call_back(task, "on_execute_callback")
        execute = _resumption(task, workload) if resuming else _execution(task, channel, workload)
        phase(ExecuteStarting())
        result = execute()
        phase(ExecuteEnded())
        try:
            follow = branching.follow_of(task, result)
        except ValueError as error:
            raise TaskFailed(str(error)) from None
        if result is not None:
            encoded = xcom.encode(result, "return_value", workload.task_id)
            _push(channel, "return_value", encoded)
    except lifecycle.WarmStop:
        channel.send(TaskOutcome(state=TaskState.FAILED, reason="the task was asked to stop"))
        raise
    except TaskDeferred as deferred:
        try:
            deferral = _deferral(deferred, workload)
        except TaskFailed as failure:
            logger.error("task failed", reason=str(failure))
            channel.send(TaskOutcome(state=TaskState.FAILED, reason=str(failure)))
            _call_back_failure(task, workload, failure, str(failure))
            return
        logger.info("task deferred", trigger=deferral.classpath, resumes_at=deferral.method_name,
                    timeout=deferral.timeout)  # fmt: skip
        channel.send(TaskOutcome(state=TaskState.DEFERRED, deferral=deferral))
        return
    except (TaskFailed, xcom.XComError) as failure:
        logger.error("task failed", reason=str(failure))
        channel.send(TaskOutcome(state=TaskState.FAILED, reason=str(failure)))
        _call_back_failure(task, workload, failure, str(failure))
        return
    except BaseException as error:  # noqa: BLE001 - a task's error of any kind fails the task
        traceback.print_exc()
        reason = traceback.format_exception_only(type(error), error)[-1].strip()
        channel.send(TaskOutcome(state=TaskState.FAILED, reason=reason))
        _call_back_failure(task, workload, error, reason)
        return
    logger.info("task succeeded", task_id=workload.task_id)
    channel.send(TaskOutcome(state=TaskState.SUCCESS, follow=follow))
    _call_back(task, "on_success_callback", exception=None, reason=None)


def _unheard(message: Any) -> None:
    """What a phase message of an untimed try becomes: nobody acts on it."""


def call_back_failure(channel, workload: Workload, reason: str, cause: str) -> None:
    """Call the failure callbacks (``on_retry_callback`` or ``on_failure_callback``) of
    a try whose task process could not: its supervisor stopped it on its
    ``execution_timeout`` (``cause`` "timeout"), or it died before reporting ("died"),
    as Airflow calls them in both cases.

    A fresh task process does it (the stopped one may have hung in native code, law 8):
    it imports the Dag file again and calls them with the try's context, ``reason`` and
    an :class:`ExecutionTimeout` or :class:`TaskProcessDied` as ``exception``. The try's
    state is the supervisor's to record; nothing here changes it.
    """
    _install_context(channel, workload)
    try:
        task = _find_task(workload)
    except lifecycle.WarmStop:
        raise
    except BaseException as error:  # noqa: BLE001 - the Dag file's error is only logged
        logs.get_logger("spawnflow.task").error(
            "callbacks not called", reason=f"{type(error).__name__}: {error}"
        )
        return
    _call_back_failure(task, workload, _CAUSES[cause](reason), reason)


def _call_back_failure(task: Task | None, workload: Workload, error: BaseException,
                       reason: str) -> None:  # fmt: skip
    """A failed try's callback: ``on_retry_callback`` if another try follows, else
    ``on_failure_callback``. None if the task was not found (nothing to call)."""
    which = "on_retry_callback" if workload.retried_if_failed() else "on_failure_callback"
    _call_back(task, which, exception=error, reason=reason)


def _call_back(task: Task | None, which: str, **extra: Any) -> None:
    """Call the task's ``which`` callbacks with its context plus ``extra``.

    The outcome was sent before (but for ``on_execute_callback``, which runs before the
    task's code): what a callback does never changes the try's state. One that raises
    is logged, with its traceback, in the try's log, and the next one still runs. A
    callback that hangs is the supervisor's to stop, after ``[core] callback_timeout``
    (``on_execute_callback``: only with an ``execution_timeout``, after the longer of
    the two, and the try fails).
    """
    if task is None or not task.callbacks.get(which):
        return
    logger = logs.get_logger("spawnflow.task")
    context = {**runtime.get_current_context(), **extra, "task": task}

    def report(function, text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()
        logger.error("callback failed", callback=which, function=callbacks.name_of(function),
                     error=text.strip().splitlines()[-1])  # fmt: skip

    logger.info("callback started", callback=which)
    try:
        callbacks.call_each(task.callbacks[which], context, report)
    except lifecycle.WarmStop:
        # The supervisor stops us (spawnflow shuts down, or callback_timeout passed):
        # the try's outcome was sent already and stands; the rest of the callbacks go.
        logger.warning("callbacks cut short: the task process was asked to stop",
                       callback=which)  # fmt: skip
        raise


def render_task(channel, workload: Workload) -> None:
    """The task process of ``tasks render``: render the task's template fields, send them
    (:class:`RenderedFields`, each as the try's log would show it) and run nothing."""
    context = _context(workload)
    runtime.install(channel, context)
    try:
        task = _find_task(workload)
        _take_mapped(task, channel, max(workload.map_index, 0))  # a mapped one: its first
        renderer = templates.Renderer(task, context)
        renderer.render_fields()
        shown = {}
        for field in templates.template_fields(task):
            value = getattr(task, field, None)
            if callable(value):  # @task.command: its function builds the command
                shown[field] = f"(the command {_name(value)} returns when the task runs)"
            else:
                shown[field] = renderer.shown(value)
        runtime.ask(lambda id: RenderedFields(id=id, fields=shown))
    except templates.TemplateError as error:
        channel.send(TaskOutcome(state=TaskState.FAILED, reason=str(error)))
        return
    except TaskFailed as failure:
        channel.send(TaskOutcome(state=TaskState.FAILED, reason=str(failure)))
        return
    except Exception as error:  # noqa: BLE001 - the Dag file's error, say, reported
        traceback.print_exc()
        reason = traceback.format_exception_only(type(error), error)[-1].strip()
        channel.send(TaskOutcome(state=TaskState.FAILED, reason=reason))
        return
    channel.send(TaskOutcome(state=TaskState.SUCCESS))


def _name(function: Any) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def _find_task(workload: Workload) -> Task:
    loading.prepare_path(workload.dag_file, workload.dags_folder)
    for dag in loading.import_dag_file(workload.dag_file):
        if dag.dag_id == workload.dag_id:
            if workload.task_id not in dag.task_dict:
                raise TaskFailed(f"Dag {dag.dag_id!r} no longer has task {workload.task_id!r}")
            return dag.task_dict[workload.task_id]
    raise TaskFailed(f"{workload.dag_file} no longer defines Dag {workload.dag_id!r}")


def _execution(task: Task, channel, workload: Workload) -> Callable[[], Any]:
    """The task's ``execute``, ready to call: a function's arguments are resolved first
    (upstream values pulled), outside ``execution_timeout`` as in Airflow."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    if isinstance(task, PythonTask | CommandTask):
        args = [_resolve(value, channel) for value in task.op_args]
        kwargs = {key: _resolve(value, channel) for key, value in task.op_kwargs.items()}
        if not _maps_attributes(task):
            kwargs.update(_element(task, channel, workload.map_index))
    if isinstance(task, PythonTask):
        function = task.python_callable
        return lambda: _call_with_context(function, args, kwargs)
    if isinstance(task, CommandTask):
        command_task = task

        def run_the_command() -> str | None:
            command = command_task.command
            if callable(command):  # @task.command: the command it returns is a template too
                command = _render_one(
                    command_task, _call_with_context(command, args, kwargs), "command"
                )
            return _run_command(str(command), command_task)

        return run_the_command
    method = getattr(task, "execute", None)
    if callable(method):  # a task class of its own (a sensor, say)
        return lambda: _call_with_context(method, [], {})
    raise TaskFailed(f"spawnflow cannot run tasks of kind {task.kind!r}")


def _element(task: Task, channel, map_index: int) -> dict[str, Any]:
    """A mapped task's keyword arguments for element ``map_index`` (none for an
    unmapped task); TaskFailed, in one sentence, when they cannot be made."""
    if task.expand_input is None:
        return {}
    if map_index < 0:
        raise TaskFailed(
            f"mapped task {task.task_id!r} was run without a map index; it runs once per "
            "element of what it is expanded over"
        )
    try:
        return mapping.element_kwargs(task, map_index, lambda source: _resolve(source, channel))
    except (ValueError, IndexError) as error:
        raise TaskFailed(str(error)) from None


def _maps_attributes(task: Task) -> bool:
    """Whether ``task`` is a task class's mapped task (``CommandTask.partial(...)``),
    whose elements set attributes rather than give arguments."""
    return task.expand_input is not None and task.expand_input.attributes


def _take_mapped(task: Task, channel, map_index: int) -> None:
    """A task class's mapped instance: its element's values set on the task, before its
    templates are rendered; TaskFailed, in one sentence, for values it cannot take."""
    if _maps_attributes(task):
        try:
            task.take_mapped(_element(task, channel, map_index))
        except ValueError as error:
            raise TaskFailed(str(error)) from None


def _render_templates(task: Task, context: dict[str, Any]) -> Any:
    """Render the task's template fields in place, logging each one rendered; the
    rendered ``templates_dict``, if the task has one. TaskFailed if a template fails."""
    renderer = templates.Renderer(task, context)
    try:
        rendered = renderer.render_fields()
    except templates.TemplateError as error:
        raise TaskFailed(str(error)) from None
    logger = logs.get_logger("spawnflow.task")
    for field, value in rendered.items():
        logger.info("template rendered", field=field, value=renderer.shown(value))
    return getattr(task, "templates_dict", None)


def _render_one(task: Task, value: Any, field: str) -> Any:
    """``value`` of ``field`` rendered (a command a callable returned), logged if it was
    a template."""
    if not templates.is_template(value):
        return value
    renderer = templates.Renderer(task, runtime.get_current_context())
    try:
        rendered = renderer.render(value, field)
    except templates.TemplateError as error:
        raise TaskFailed(str(error)) from None
    logs.get_logger("spawnflow.task").info(
        "template rendered", field=field, value=renderer.shown(rendered)
    )
    return rendered


def _resumption(task: Task, workload: Workload) -> Callable[[], Any]:
    """A deferred try's ``next_method`` with the trigger's event, ready to call."""
    name = workload.next_method
    assert name is not None  # only a resuming workload comes here
    kwargs = xcom.decode(workload.next_kwargs or "{}")
    if isinstance(task, PythonTask):  # a function of its Dag file, not a Task's own method
        module = sys.modules.get(getattr(task.python_callable, "__module__", ""))
        method = getattr(module, name, None)
    else:
        method = getattr(task, name, None)
    if not callable(method):
        raise TaskFailed(
            f"task {task.task_id!r} deferred to resume at {name!r}, but it has no method of "
            "that name and its Dag file no function of that name"
        )
    return lambda: _call_with_context(method, [], kwargs)


def _deferral(deferred: TaskDeferred, workload: Workload) -> Deferral:
    """What the supervisor records of a deferral; TaskFailed if the triggerer could not
    build the trigger again."""
    classpath, trigger_kwargs = deferred.trigger.serialize()
    if defined_in_dag_file(classpath):
        raise TaskFailed(
            f"the trigger class {classpath_of(deferred.trigger).rsplit('.', 1)[-1]} is defined "
            "in the Dag file, which the triggerer does not import: put it in a module of its "
            "own (the Dags folder is on the triggerer's path)"
        )
    try:
        encoded_kwargs = xcom.encode(trigger_kwargs, subject=f"an argument of {classpath}")
        next_kwargs = xcom.encode(deferred.kwargs, subject="an argument in TaskDeferred(kwargs=)")
    except xcom.XComError as error:
        raise TaskFailed(str(error)) from None
    return Deferral(classpath=classpath, trigger_kwargs=encoded_kwargs,
                    method_name=deferred.method_name, next_kwargs=next_kwargs,
                    timeout=deferred.timeout)  # fmt: skip


def _call_with_context(function, args: list, kwargs: dict) -> Any:
    """Call ``function``; a parameter named ``context`` gets the task's context, one named
    ``templates_dict`` the task's rendered ``templates_dict``."""
    if _takes(function, "context") and "context" not in kwargs:
        kwargs = {**kwargs, "context": runtime.get_current_context()}
    if _takes(function, "templates_dict") and "templates_dict" not in kwargs:
        kwargs = {**kwargs, "templates_dict": runtime.get_current_context().get("templates_dict")}
    result = function(*args, **kwargs)
    if inspect.iscoroutine(result):  # an async def task
        import asyncio

        result = asyncio.run(_watched(result))
    return result


def _takes(function, name: str) -> bool:
    """Whether ``function`` has a parameter called ``name``."""
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


async def _watched(coro) -> Any:
    """Run an ``async def`` task's coroutine under a watchdog that logs and counts each
    stall of the loop past ``[triggerer] blocked_main_thread_warning_threshold``, naming
    the coroutine that held it (every asyncio task the coroutine starts is watched too)."""
    import asyncio

    from spawnflow.bootstrap.loopwatch import LoopWatchdog

    context = runtime.get_current_context()
    task_id = context["task_id"]
    logger = logs.get_logger("spawnflow.task")
    threshold = settings_module.current().triggerer.blocked_main_thread_warning_threshold

    def stalled(seconds: float, culprits: list[str]) -> None:
        named = culprits or ["something other than the task's coroutines"]
        logger.warning("event loop blocked", seconds=round(seconds, 3), threshold=threshold,
                       culprits=named)  # fmt: skip

    def name_of(inner) -> str:
        return f"task {task_id} ({getattr(inner, '__qualname__', type(inner).__name__)})"

    watchdog = LoopWatchdog(threshold, metric="tasks.blocked_main_thread", on_stall=stalled)
    loop = asyncio.get_running_loop()
    loop.set_task_factory(watchdog.task_factory(name_of))
    watchdog.install()
    try:
        return await loop.create_task(coro)
    finally:
        watchdog.close()


def _run_command(command: str, task: CommandTask) -> str | None:
    """Run ``command`` in a shell; its output goes to ours, its last line is the XCom."""
    return run_command(command, env=task.env, cwd=task.cwd)


def run_command(command: str, *, env: dict[str, str] | None = None,
                cwd: str | None = None) -> str | None:  # fmt: skip
    """Run ``command`` in the OS's shell and return the last line it printed.

    Its output is copied to our stdout by a thread, so that the main thread only waits
    for the process, in short steps: a warm stop then reaches it on every OS (on Windows
    a blocking pipe read cannot be interrupted). Each line is decoded as UTF-8, or,
    failing that, in the locale's encoding (what Windows programs write to a pipe),
    never raising on bytes that fit neither. A stop ends the command too.
    """
    process = subprocess.Popen(
        command, shell=True, cwd=cwd or None, env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE, stderr=None,
    )  # fmt: skip
    assert process.stdout is not None  # a pipe, as asked
    last: deque[str] = deque(maxlen=1)
    copier = threading.Thread(
        target=_copy_output, args=(process.stdout, last), name="command-output", daemon=True
    )
    copier.start()
    try:
        while True:
            try:
                code = process.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                continue
    except BaseException:
        _end(process)  # the task is stopping: its command goes with it
        raise
    copier.join(timeout=5.0)  # what is left in the pipe (a background job may hold it)
    if code != 0:
        raise TaskFailed(f"the command exited with code {code}")
    return last[0] if last else None


def _end(process: subprocess.Popen) -> None:
    """Ask the command to stop (POSIX: SIGTERM, which its process group got already;
    Windows: TerminateProcess), and kill it if it is still there after a moment."""
    process.terminate()
    try:
        process.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        process.kill()


def _copy_output(pipe: Any, last: deque[str]) -> None:
    """Copy the command's output to our stdout line by line; keep the last non-empty one."""
    fallback = locale.getpreferredencoding(False)
    with pipe:
        for raw in pipe:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode(fallback, errors="replace")
            sys.stdout.write(line)
            sys.stdout.flush()
            if line.strip():
                last.append(line.rstrip("\r\n"))


def _resolve(value: Any, channel) -> Any:
    if isinstance(value, XComArg):
        from spawnflow.bootstrap.wire import ErrorResponse

        answer = channel.call(XComPull(id=channel.next_id(), task_id=value.task.task_id,
                                       key=value.key))  # fmt: skip
        if isinstance(answer, ErrorResponse):
            raise TaskFailed(answer.message)
        return None if answer.value is None else xcom.decode(answer.value)
    if isinstance(value, list):
        return [_resolve(item, channel) for item in value]
    if isinstance(value, tuple):
        return tuple(_resolve(item, channel) for item in value)
    if isinstance(value, dict):
        return {key: _resolve(item, channel) for key, item in value.items()}
    return value


def _push(channel, key: str, value: str) -> None:
    from spawnflow.bootstrap.wire import ErrorResponse

    answer = channel.call(XComPush(id=channel.next_id(), key=key, value=value))
    if isinstance(answer, ErrorResponse):
        raise TaskFailed(answer.message)
