"""Messages of ``tasks render``: the task process's rendered template fields."""

from __future__ import annotations

from spawnflow.bootstrap.wire import Request


class RenderedFields(Request, frozen=True):
    """The task's template fields, rendered, each as text (secrets it read hidden);
    answered with ``Done``."""

    fields: dict[str, str]
