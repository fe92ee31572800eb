"""What a running task can ask for: its context, Variables, XComs of other tasks.

Only usable inside a task process, where the task runner installs the channel to the
task's supervisor. The task process never opens the database: each call is a
request its supervisor answers.
"""

from __future__ import annotations

from typing import Any

from spawnflow.bootstrap import platform as platforms

_channel = None
_context: dict[str, Any] | None = None

_MISSING = object()


class NotInTask(RuntimeError):
    """A runtime call made outside a running task."""


class SupervisorError(RuntimeError):
    """The supervisor refused or could not answer a request; ``kind`` is a stable code
    (``XCOM_BACKEND_ERROR``, ``XCOM_TOO_LARGE``, ``TASK_NOT_RUNNING``…)."""

    def __init__(self, kind: str, message: str):
        # The kind leads the text: it reaches the task instance's reason.
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


def _forget_in_fork_child() -> None:
    # A process the task forks must not use its parent's pipe to the supervisor (nor
    # a lock another thread held at the fork): there, these calls raise NotInTask.
    global _channel, _context
    _channel, _context = None, None


platforms.at_fork_in_child(_forget_in_fork_child)


def install(channel: Any, context: dict[str, Any]) -> None:
    """Called by the task runner before the task's code runs."""
    global _channel, _context
    _channel, _context = channel, context


def get_current_context() -> dict[str, Any]:
    """The running task's context: ``dag_id``, ``task_id``, ``run_id``, ``logical_date``,
    ``data_interval_start``, ``data_interval_end``, ``try_number``, ``params``, ``conf``,
    ``partition_key`` (of a partition-driven run, else None) and
    ``triggering_asset_events`` (of an asset-triggered run: the events by asset URI, each
    a dict with ``id``, ``partition_key``, ``extra``, ``timestamp`` and ``source_*``).

    Raises:
        NotInTask: outside a running task.
    """
    if _context is None:
        raise NotInTask("get_current_context() works only inside a running task")
    return dict(_context)


def ask(make: Any) -> Any:
    """Send the request ``make(id)`` builds to the supervisor and return its answer."""
    from spawnflow.bootstrap.wire import ErrorResponse

    if _channel is None:
        raise NotInTask("this works only inside a running task")
    answer = _channel.call(make(_channel.next_id()))
    if isinstance(answer, ErrorResponse):
        raise SupervisorError(answer.kind, answer.message)
    return answer


class Variable:
    """Read Variables (``spawnflow variables set KEY VALUE``) from a task."""

    @staticmethod
    def get(key: str, default: Any = _MISSING) -> str:
        """The Variable's value; ``default`` if it is not set (KeyError without a default)."""
        from spawnflow.comms.tasks import GetVariable

        answer = ask(lambda id: GetVariable(id=id, key=key))
        if answer.value is None:
            if default is _MISSING:
                raise KeyError(f"there is no Variable {key!r}")
            return default
        return answer.value


def xcom_pull(task_id: str, key: str = "return_value") -> Any:
    """The value ``task_id`` of this Dag run pushed under ``key``, or None."""
    from spawnflow.comms.tasks import XComPull
    from spawnflow.sdk import xcom

    answer = ask(lambda id: XComPull(id=id, task_id=task_id, key=key))
    return None if answer.value is None else xcom.decode(answer.value)


def xcom_push(key: str, value: Any) -> None:
    """Push ``value`` under ``key`` for the downstream tasks of this run."""
    from spawnflow.comms.tasks import XComPush
    from spawnflow.sdk import xcom

    encoded = xcom.encode(value, key, get_current_context()["task_id"])
    ask(lambda id: XComPush(id=id, key=key, value=encoded))


async def xcom_pull_async(task_id: str, key: str = "return_value") -> Any:
    """:func:`xcom_pull` for async tasks: several may wait at once."""
    import asyncio

    return await asyncio.to_thread(xcom_pull, task_id, key)


async def xcom_push_async(key: str, value: Any) -> None:
    """:func:`xcom_push` for async tasks: several may wait at once, each gets its answer."""
    import asyncio

    await asyncio.to_thread(xcom_push, key, value)
