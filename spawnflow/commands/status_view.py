"""How a status snapshot looks on a terminal: rich renderables, live or printed once.

The same renderables serve ``spawnflow status`` and ``standalone``'s live view; with
colours off (not a terminal, or ``NO_COLOR``) they print as plain lines, which is also
how the tests read them.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Sequence

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from spawnflow.comms.status import DagGrid, StatusSnapshot

#: Each state's mark in the grid and its colour: ASCII, so that every console prints it.
MARKS: dict[str, tuple[str, str]] = {
    "success": ("+", "green"),
    "failed": ("x", "bold red"),
    "running": (">", "bright_cyan"),
    "queued": ("~", "grey62"),
    "scheduled": (".", "grey62"),
    "none": (".", "grey50"),
    "up_for_retry": ("r", "yellow"),
    "upstream_failed": ("!", "dark_orange"),
    "skipped": ("-", "magenta"),
    "deferred": ("d", "medium_purple"),
    "restarting": ("*", "cyan"),
    "removed": (" ", "grey50"),
}


def _legend() -> str:
    """``+ success  x failed  . scheduled/none ...``: each mark once, with its states."""
    states_of: dict[str, list[str]] = {}
    for state, (symbol, _) in MARKS.items():
        states_of.setdefault(symbol, []).append(state)
    return "  ".join(f"{symbol} {'/'.join(states)}" for symbol, states in states_of.items()
                     if symbol.strip())  # fmt: skip


LEGEND = _legend()


def mark(state: str | None) -> Text:
    """A state as its grid mark, coloured (a task the run has no instance of: blank)."""
    if state is None:
        return Text(" ")
    symbol, style = MARKS.get(state, ("?", "bold"))
    return Text(symbol, style=style)


def render(snapshot: StatusSnapshot, *, headline: Sequence[str] = ()) -> RenderableType:
    """The whole view: ``headline`` lines first (standalone's components), then the Dags'
    grids, the tasks in flight, the import errors and the components' health."""
    taken = f"{snapshot.taken_at.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
    parts: list[RenderableType] = [Text(f"spawnflow status at {taken}", style="bold")]
    parts += [Text(line) for line in headline]
    parts.append(_grids(snapshot.dags))
    parts.append(_in_flight(snapshot))
    parts.append(_import_errors(snapshot))
    parts.append(_components(snapshot))
    return Group(*parts)


def _section(title: str) -> Text:
    return Text(f"\n{title}", style="bold underline")


def _grids(dags: Sequence[DagGrid]) -> RenderableType:
    if not dags:
        return Group(_section("Dags"), Text("No Dags yet: put Dag files in the Dags folder."))
    parts: list[RenderableType] = [_section("Dags (newest run on the right)")]
    for one in dags:
        newest = one.runs[-1] if one.runs else None
        about = f"newest {newest.run_id} ({newest.state})" if newest else "no runs yet"
        paused = ", paused" if one.paused else ""
        parts.append(Text.assemble((one.dag_id, "bold"), f"  {one.schedule or 'no schedule'}"
                                   f"{paused}  ", (about, "dim")))  # fmt: skip
        if one.runs:
            parts.append(_grid(one))
    parts.append(Text(LEGEND, style="dim"))
    return Group(*parts)


def _grid(one: DagGrid) -> Table:
    """Tasks down, runs across (oldest first), the run's own state on top."""
    grid = Table(box=None, show_header=False, padding=(0, 1, 0, 0), pad_edge=False)
    grid.add_column(no_wrap=True)
    for _ in one.runs:
        grid.add_column(justify="center", no_wrap=True)
    grid.add_row("  (run)", *[mark(run.state) for run in one.runs])
    for task_id in one.task_ids:
        grid.add_row(f"  {task_id}", *[mark(run.task_states.get(task_id)) for run in one.runs])
    return grid


def _in_flight(snapshot: StatusSnapshot) -> RenderableType:
    title = _section(f"In flight ({len(snapshot.running)})")
    if not snapshot.running:
        return Group(title, Text("Nothing queued, running or deferred."))
    table = Table(box=None, padding=(0, 2, 0, 0), pad_edge=False, header_style="bold")
    for name in ("dag_id", "run_id", "task_id", "state", "try", "for"):
        table.add_column(name, no_wrap=True)
    for task in snapshot.running:
        since = "-" if task.start_date is None else elapsed(snapshot.taken_at - task.start_date)
        table.add_row(task.dag_id, task.run_id, task.task_id,
                      Text(task.state, style=MARKS.get(task.state, ("", ""))[1]),
                      str(task.try_number), since)  # fmt: skip
    return Group(title, table)


def _import_errors(snapshot: StatusSnapshot) -> RenderableType:
    title = _section(f"Import errors ({len(snapshot.import_errors)})")
    if not snapshot.import_errors:
        return Group(title, Text("None."))
    lines = [Text.assemble((e.fileloc, "bold red"), f": {e.error}") for e in snapshot.import_errors]
    return Group(title, *lines, Text("spawnflow dags list-import-errors shows why", style="dim"))


def _components(snapshot: StatusSnapshot) -> RenderableType:
    title = _section("Components")
    if not snapshot.components:
        return Group(title, Text("None has shown signs of life: start `spawnflow standalone`."))
    table = Table(box=None, padding=(0, 2, 0, 0), pad_edge=False, header_style="bold")
    for name in ("component", "where", "last seen", "health"):
        table.add_column(name, no_wrap=True)
    for one in snapshot.components:
        where = f"{one.hostname}:{one.pid}" if one.pid is not None else one.hostname or "-"
        if one.last_seen is None:
            seen, health = "never", Text("unknown", style="yellow")
        else:
            ago = snapshot.taken_at - one.last_seen
            seen = f"{elapsed(ago)} ago"
            late = ago.total_seconds() > one.timeout
            health = (
                Text(f"late (over {one.timeout:g} s)", style="bold red")
                if late
                else Text("ok", style="green")
            )
        table.add_row(one.component, where, seen, health)
    return Group(title, table)


def elapsed(span: dt.timedelta) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``: as long as a person needs to read it."""
    seconds = max(0, int(span.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def plain_text(renderable: RenderableType, width: int = 160) -> str:
    """The view as plain lines, without colours or cursor movement."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
