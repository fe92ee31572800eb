"""The Dag callback process (role ``dag-callback``): import a Dag file, call one of its
Dag's callbacks for a run that ended, report what raised.

Started by the scheduler through the launcher when a run whose Dag has an
``on_success_callback`` or ``on_failure_callback`` ends (see
:mod:`spawnflow.processors.scheduler.callbacks`). It never opens the database and never
imports SQLAlchemy: a callback is user code, and whatever it does cannot reach the
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


def call_back(channel, dag_file: str, dags_folder: str | None, dag_id: str, which: str,
              context: dict[str, Any]) -> None:  # fmt: skip
    """Call Dag ``dag_id``'s ``which`` callbacks (as its file defines them now) with
    ``context``, then send what raised and leave."""
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
    if dag is not None:
        functions = dag.callbacks.get(which, [])
        if not functions:
            problem = f"Dag {dag_id!r} no longer has an {which}"
        logs.get_logger("spawnflow.dag_callback").info(
            "callback started", dag_id=dag_id, callback=which, run_id=context.get("run_id")
        )
        callbacks.call_each(
            functions, context, lambda function, text: errors.append(
                f"{callbacks.name_of(function)} raised:\n{text.rstrip()}"
            )
        )  # fmt: skip
    channel.send(DagCallbackEnded(errors=errors, problem=problem))
    # Threads the callback started are not waited for; only our handlers are flushed.
    logs.flush()
    os._exit(lifecycle.EXIT_OK)
