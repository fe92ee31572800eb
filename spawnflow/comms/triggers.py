"""Messages between the triggerer (which owns the database) and its trigger runner
child (role ``trigger-runner``, no database), which runs every trigger on one loop."""

from __future__ import annotations

import msgspec

from spawnflow.bootstrap.wire import Message


class RunTrigger(Message, frozen=True):
    """Start this trigger (again: the runner replaces one it runs already)."""

    trigger_id: int
    classpath: str
    #: The trigger's keyword arguments, as JSON text (see ``spawnflow.sdk.xcom``).
    kwargs: str
    #: Who waits for it, for log lines and the watchdog: a task instance or an asset.
    owner: str
    #: The watched asset's URI, for an asset watcher's trigger; None for a task's.
    asset_uri: str | None = None


class CancelTrigger(Message, frozen=True):
    """Stop this trigger: it fired, its task instance moved on, or another triggerer
    has it now."""

    trigger_id: int


class TriggerFired(Message, frozen=True):
    """A trigger yielded an event."""

    trigger_id: int
    #: The event's payload as JSON text (see ``spawnflow.sdk.xcom``).
    payload: str
    #: Unique per event (the runner made it): an event written twice is recognised.
    event_id: str
    partition_key: str | None = None
    #: For an asset watcher: keys of the asset's state store to set with the event, in
    #: the same transaction, each as JSON text.
    state: dict[str, str] = msgspec.field(default_factory=dict)


class TriggerEnded(Message, frozen=True):
    """A trigger's ``run()`` ended: it raised (``error``), or returned without an event."""

    trigger_id: int
    error: str | None = None
