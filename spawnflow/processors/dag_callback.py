"""The Dag callback process (role ``dag-callback``): import a Dag file, call one of its
Dag's callbacks for a run that ended, or a task's failure callbacks for a try whose
supervisor was lost, and report what raised.

Started by the scheduler through the launcher when a run whose Dag has an
``on_success_callback`` or ``on_failure_callback`` ends, and when the scheduler fails
(or retries) a try whose supervisor stopped heartbeating or whose worker died, so that
no task process is left to call its ``on_failure_callback`` or ``on_retry_callback``
(see :mod:`spawnflow.processors.scheduler.callbacks`). It never opens the database and
never imports SQLAlchemy: a callback is user code, and whatever it does cannot reach the
scheduler's state. Its one message is a :class:`DagCallbackEnded`.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from spawnflow.bootstrap import lifecycle, logs
from spawnflow.bootstrap.wire import Message
from spawnflow.sdk import callbacks, loading

TARGET = "spawnflow.processors.dag_callback:call_back"


class DagCallbackEnded(Message, frozen=True):
    """What the callbacks of one run did: the error of each one that raised (its
    traceback's text), or why none could be called (the Dag file does not import...)."""

    errors: list[str] = []
    problem: str | None = None


class TaskSupervisorLost(Exception):
    """The try's supervisor stopped heartbeating, or its worker died, while the task ran:
    the ``exception`` in the context of the failure callbacks the scheduler has called."""


def call_back(channel, dag_file: str, dags_folder: str | None, dag_id: str, which: str,
              context: dict[str, Any], task_id: str | None = None) -> None:  # fmt: skip
    """Call Dag ``dag_id``'s ``which`` callbacks (as its file defines them now) with
    ``context`` (task ``task_id``'s, if given, with the task and a
    :class:`TaskSupervisorLost` added), then send what raised and leave."""
    errors: list[str] = []
    problem = None
    try:
        loading.prepare_path(dag_file, dags_folder)
        dag = next((d for d in loading.import_dag_file(dag_file) if d.dag_id == dag_id), None)
    except Exception as error:  # noqa: BLE001 - the file's error is the report
        dag = None
        problem = (
            f"{dag_file} did not import: "
            + "".join(traceback.format_exception_only(type(error), error)).strip()
        )
    if dag is None and problem is None:
        problem = f"{dag_file} no longer defines Dag {dag_id!r}"
    owner: Any = dag
    if dag is not None and task_id is not None:
        owner = dag.task_dict.get(task_id)
        if owner is None:
            problem = f"Dag {dag_id!r} no longer has a task {task_id!r}"
        else:
            context = {**context, "task": owner,
                       "exception": TaskSupervisorLost(context.get("reason"))}  # fmt: skip
    if owner is not None:
        functions = owner.callbacks.get(which, [])
        if not functions:
            whose = f"task {task_id!r}" if task_id else f"Dag {dag_id!r}"
            problem = f"{whose} no longer has an {which}"
        logs.get_logger("spawnflow.dag_callback").info(
            "callback started", dag_id=dag_id, task_id=task_id, callback=which,
            run_id=context.get("run_id"),
        )  # fmt: skip
        callbacks.call_each(
            functions, context, lambda function, text: errors.append(
                f"{callbacks.name_of(function)} raised:\n{text.rstrip()}"
            )
        )  # fmt: skip
    channel.send(DagCallbackEnded(errors=errors, problem=problem))
    # Threads the callback started are not waited for; only our handlers are flushed.
    logs.flush()
    os._exit(lifecycle.EXIT_OK)
