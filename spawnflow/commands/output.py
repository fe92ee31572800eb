"""Command output: plain-text tables for people, JSON or YAML for scripts (``--output``)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces, with a rule under the headers."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def pairs(rows: Sequence[tuple[str, str]]) -> str:
    """``label  value`` lines with the values aligned."""
    width = max((len(label) for label, _ in rows), default=0)
    return "\n".join(f"{label.ljust(width)}  {value}".rstrip() for label, value in rows)


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
    plain = [{key: _plain(value) for key, value in record.items()} for record in records]
    if output == "json":
        click.echo(json.dumps(plain, indent=2, ensure_ascii=False))
        return
    import yaml  # only here: the listing commands stay light (see services.listings)

    click.echo(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True).rstrip())


def _plain(value: Any) -> Any:
    """A value JSON and YAML write as such: times as RFC 3339 UTC text."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return aware.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
