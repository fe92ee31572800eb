"""Command output: tables for people (rendered by rich), JSON or YAML for scripts (``--output``).

A table is a header line, a rule and a row per line, on a terminal in colour and fitted
to its width, and piped as plain ASCII text as wide as its longest cell (a script or a
``grep`` sees whole values, never a cell wrapped or cut at some width).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import enum
import io
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import RenderableType

#: The width a piped table may take: as much as its cells need.
_UNLIMITED = 1_000_000


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A header line, a rule under it and a line per row, the columns left-aligned."""
    from rich import box
    from rich.table import Column, Table

    people = _is_terminal(sys.stdout)
    # Piped: ASCII, which any encoding a pipe has (cp1252 on Windows) can write.
    ruled = box.SIMPLE_HEAD if people else box.Box("    \n    \n -- \n" + "    \n" * 5, ascii=True)
    # No padding but one space on the right: with the box's blank column, cells are two
    # spaces apart, and nothing is added before the first column or after the last.
    # Piped, a cell is never wrapped, however long (on a terminal, rich fits it to the width).
    columns = [Column(header, no_wrap=not people) for header in headers]
    grid = Table(*columns, box=ruled, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                 header_style="bold", border_style="dim")  # fmt: skip
    for row in rows:
        grid.add_row(*row)
    return _render(grid, people)


def pairs(rows: Sequence[tuple[str, str]]) -> str:
    """``label  value`` lines with the values aligned."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 2, 0, 0))
    grid.add_column(style="bold")
    grid.add_column()
    for label, value in rows:
        grid.add_row(label, value)
    return _render(grid, _is_terminal(sys.stdout))


def _render(renderable: RenderableType, people: bool) -> str:
    """The text of ``renderable``, in colour where the command's output is a terminal
    that wants it (see :func:`spawnflow.bootstrap.logs.console_colors`: ``NO_COLOR``)."""
    import shutil

    from rich.console import Console

    from spawnflow.bootstrap import logs

    colors = logs.console_colors(sys.stdout)
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        # A terminal's width is known to shutil too (and COLUMNS overrides it).
        width=shutil.get_terminal_size().columns if people else _UNLIMITED,
        color_system="auto" if colors else None,
        force_terminal=colors,
        # Cells are values, not rich markup: "[x]" or ":smile:" in a Dag id stay as they are.
        markup=False,
        emoji=False,
        highlight=False,
        # Rendered into a string, which click writes (and translates on Windows' console).
        legacy_windows=False,
    )
    console.print(renderable)
    # Each line is padded to its table's width: a line's end is where its text ends.
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


#: What ``--output`` offers: a table for people, JSON or YAML for scripts.
OUTPUTS = ("table", "json", "yaml")


def output_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--output table|json|yaml`` (``-o``), as Airflow's listing commands have it."""
    return click.option(
        "--output", "-o", type=click.Choice(OUTPUTS), default="table", show_default=True,
        help="table for people; json or yaml for scripts (every field, nothing shortened, "
        "times in RFC 3339 UTC).",
    )(command)  # fmt: skip


def emit(output: str, records: Sequence[Mapping[str, Any]], as_table: Callable[[], str],
         empty: str) -> None:  # fmt: skip
    """Print ``records`` as ``output`` asks: ``as_table()`` (or ``empty`` when there is
    nothing) for a table; the records themselves, typed, for JSON and YAML (an empty
    list when there is nothing, so that a script need not parse a sentence)."""
    if output == "table":
        click.echo(as_table() if records else empty)
        return
    click.echo(dumps(output, list(records)))


def emit_one(output: str, record: Mapping[str, Any], as_text: Callable[[], str]) -> None:
    """Print one object (a Dag, an XCom, this installation) as ``output`` asks:
    ``as_text()`` for people; the object itself, typed, for JSON and YAML (an object,
    not a list of one)."""
    click.echo(as_text() if output == "table" else dumps(output, record))


@contextlib.contextmanager
def children_print_to_stderr(output: str) -> Iterator[None]:
    """While a command whose stdout a script reads (``--output json|yaml``) runs child
    processes, what they print (a Dag file, at import) goes to stderr, not into the
    report: children inherit file descriptor 1 (a forkserver started meanwhile too), so
    it points at stderr until the command writes its report."""
    if output == "table":
        yield
        return
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to keep clean
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def dumps(output: str, value: Any) -> str:
    """``value`` as JSON or YAML text (``output``), times in RFC 3339 UTC."""
    plain = _plain(value)
    if output == "json":
        return json.dumps(plain, indent=2, ensure_ascii=False)
    import yaml  # only here: the listing commands stay light (see services.listings)

    return yaml.safe_dump(plain, sort_keys=False, allow_unicode=True).rstrip()


def _plain(value: Any) -> Any:
    """A value JSON and YAML write as such. Times are RFC 3339 UTC text, a duration its
    seconds; what neither has (a set, a Decimal, a UUID, bytes) is a list or text that
    keeps it exactly (bytes in base64, as an XCom stores them)."""
    if isinstance(value, enum.Enum):  # a state: YAML's safe writer knows no str subclass
        value = value.value
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return aware.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=repr)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal | uuid.UUID | Path):
        return str(value)
    return value


def map_index_cell(map_index: int) -> str:
    """A map index as the tables show it: blank for an unmapped task."""
    return str(map_index) if map_index >= 0 else ""
