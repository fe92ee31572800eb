"""``spawnflow config show | get | reference``."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import click

from spawnflow.bootstrap import settings_table
from spawnflow.commands.groups import Group
from spawnflow.commands.state import State, pass_state


@click.group(
    "config", cls=Group, short_help="Show the effective settings and where they came from."
)
def config_group() -> None:
    """Inspect the effective settings."""


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, dict):  # an inline table; secrets are not printed
        items = ", ".join(
            f"{_toml_key(key)} = "
            + (_toml_value("***") if settings_table.is_secret_key(key) else _toml_value(item))
            for key, item in value.items()
        )
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else _toml_value(key)


@config_group.command("show", short_help="Print every setting in config-file form.")
@click.option("--sources", is_flag=True, help="Say where each value came from.")
@pass_state
def show_command(state: State, sources: bool) -> None:
    """Print every setting as TOML, the format of the config file."""
    settings = state.settings()
    lines: list[str] = []
    for section in settings_table.SECTIONS:
        lines += ([""] if lines else []) + [f"[{section}]"]
        for option in (o for o in settings_table.OPTIONS if o.section == section):
            entry = settings.entry(option.section, option.key)
            if entry.value is None:
                line = f"# {option.key} is unset"
            else:
                line = f"{option.key} = {_toml_value(entry.value)}"
            if sources:
                line += f"  # from {entry.source}"
            lines.append(line)
    click.echo("\n".join(lines))


@config_group.command("get", short_help="Print one setting's value.")
@click.argument("name", metavar="SECTION.KEY")
@pass_state
def get_command(state: State, name: str) -> None:
    """Print the value of one setting, e.g. `spawnflow config get core.mp_start_method`."""
    section, _, key = name.partition(".")
    if settings_table.lookup(section, key) is None:
        close = difflib.get_close_matches(name, settings_table.names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; see `spawnflow config show`."
        raise click.BadParameter(f"{name!r} is not a setting{hint}", param_hint="SECTION.KEY")
    value = state.settings().value(section, key)
    click.echo("" if value is None else str(value).lower() if isinstance(value, bool) else value)


@config_group.command("reference", short_help="Print the table of all settings (Markdown).")
def reference_command() -> None:
    """Print every setting with its environment variable, type, default and help."""
    click.echo(settings_table.render_markdown())
