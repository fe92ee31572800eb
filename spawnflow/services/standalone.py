"""``spawnflow standalone``: the Dag processor and the scheduler, as children, on one screen.

Both are launched by the launcher and report a ComponentStatus after each pass or
loop; this process shows one status line per component and stops the whole tree
on Ctrl-C or SIGTERM (warm; a second Ctrl-C: cold).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from spawnflow.bootstrap import launcher, lifecycle
from spawnflow.bootstrap.child import stop_many
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms import ComponentStatus

COMPONENTS = {
    "dag-processor": ("spawnflow.processors.dag_processor.manager:run", "dag_processor"),
    "scheduler": ("spawnflow.processors.scheduler.job:run", "scheduler"),
}


@dataclass
class Outcome:
    """How standalone ended."""

    reason: str
    exit_code: int
    statuses: dict[str, ComponentStatus] = field(default_factory=dict)


def run(settings: Settings, *, exit_when_idle: bool, show: Callable[[str], None]) -> Outcome:
    """Launch the components and watch them until idle (if asked), stopped, or one dies."""
    from multiprocess.connection import wait

    children = {}
    for role, (target, component) in COMPONENTS.items():
        spec = launcher.ChildSpec(role, target, settings=settings, warm_stop_group=False)
        children[role] = launcher.launch(spec, component=component)
    statuses: dict[str, ComponentStatus] = {}
    idle_after: int | None = None
    last_line = ""
    try:
        for child in children.values():
            child.wait_ready(timeout=120)
        while True:
            if lifecycle.stop_requested.is_set():
                return Outcome("stopped", 0, statuses)
            objects = [c.channel.connection for c in children.values()]
            objects += [c.sentinel for c in children.values()]
            wait(objects, timeout=1.0)
            for role, child in children.items():
                while child.channel.poll():
                    try:
                        message = child.channel.recv()
                    except (EOFError, OSError):
                        break
                    if isinstance(message, ComponentStatus):
                        statuses[role] = message
                if not child.is_alive():
                    status = child.join(timeout=30)
                    show(f"the {role} {status.describe(meaning=False)}; stopping")
                    return Outcome(f"the {role} {status.describe()}", 1, statuses)
            line = " | ".join(
                f"{role}: {statuses[role].text if role in statuses else 'starting'}"
                for role in children
            )
            if line != last_line:
                show(line)
                last_line = line
            if exit_when_idle:
                processor, scheduler = statuses.get("dag-processor"), statuses.get("scheduler")
                if processor is not None and scheduler is not None and idle_after is None:
                    # Dags from the first pass count only once the scheduler saw them.
                    idle_after = scheduler.loops + 1
                if idle_after is not None and scheduler.idle and scheduler.loops > idle_after:
                    return Outcome("every due Dag run has finished", 0, statuses)
    finally:
        with lifecycle.unwinding():  # a second Ctrl-C while stopping: cold
            started = time.monotonic()
            stop_many(list(children.values()))
            show(f"stopped in {time.monotonic() - started:.1f} s")
