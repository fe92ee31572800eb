"""Callbacks: functions a Dag file names to be called when a task or a run changes state.

Task callbacks (``on_execute_callback``, ``on_success_callback``,
``on_retry_callback``, ``on_failure_callback``) run in the task process, after the try's
outcome is decided; Dag callbacks (``on_success_callback``, ``on_failure_callback`` on a
Dag) run in a child of the scheduler that imports the Dag file and has no database.
Each gets one argument, the context (a dict). A callback that raises is logged and
changes nothing: the task's or the run's state is the one it had.

A callback is a callable, or a list of callables called in order. The scheduler never
imports a Dag file, so the serialized Dag carries only which callbacks exist.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from typing import Any

TASK_CALLBACKS = (
    "on_execute_callback",
    "on_success_callback",
    "on_retry_callback",
    "on_failure_callback",
)
DAG_CALLBACKS = ("on_success_callback", "on_failure_callback")

Callback = Callable[[dict[str, Any]], Any]


def callback_list(value: Any, what: str) -> list[Callback]:
    """``value`` (None, a callable or a list of them) as a list; ValueError otherwise."""
    if value is None:
        return []
    items: Sequence[Any] = value if isinstance(value, list | tuple) else [value]
    for item in items:
        if not callable(item):
            raise ValueError(
                f"{what} {item!r} must be a callable or a list of callables "
                "(a function that takes the context)"
            )
    return list(items)


def call_each(functions: Sequence[Callback], context: dict[str, Any],
              on_error: Callable[[Callback, str], None]) -> int:  # fmt: skip
    """Call each function with ``context``; one that raises is reported to
    ``on_error(function, traceback text)`` and the next still runs. How many raised."""
    failed = 0
    for function in functions:
        try:
            function(context)
        except Exception:  # noqa: BLE001 - a callback's error never reaches the task's state
            failed += 1
            on_error(function, traceback.format_exc())
    return failed


def name_of(function: Callable[..., Any]) -> str:
    """``module.qualname`` of a callback, for the logs."""
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{getattr(function, '__module__', '?')}.{name}"
