"""``spawnflow config show | get | reference``."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import click

from spawnflow.bootstrap import settings_table
from spawnflow.bootstrap.settings import Entry, Settings
from spawnflow.commands.groups import Group
from spawnflow.commands.output import dumps
from spawnflow.commands.state import State, pass_state


@click.group(
    "config", cls=Group, short_help="Show the effective settings and where they came from."
)
def config_group() -> None:
    """Inspect the effective settings."""


def _shown(entry: Entry) -> Any:
    """A setting's value as ``config show`` prints it: a path as text, a database URL's
    password and the secrets of an options object (``key``, ``secret``, ``token``, ...)
    as ``***`` (``config get`` prints a value whole, for scripts)."""
    value = entry.value
    option = settings_table.lookup(entry.section, entry.key)
    if option is not None and option.kind is settings_table.DATABASE_URL and value:
        return settings_table.hide_password(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {k: "***" if settings_table.is_secret_key(k) else v for k, v in value.items()}
    return value


def _entries(settings: Settings) -> dict[str, list[Entry]]:
    """Every setting by section, in the order of the settings table."""
    return {
        section: [settings.entry(o.section, o.key) for o in settings_table.OPTIONS
                  if o.section == section]
        for section in settings_table.SECTIONS
    }  # fmt: skip


def _as_toml(settings: Settings, sources: bool) -> str:
    """The settings as a config file would hold them; an unset one (TOML has no null) and
    each value's source (``sources``) as comments, which is why tomlkit writes it."""
    import tomlkit

    document = tomlkit.document()
    for section, entries in _entries(settings).items():
        table = tomlkit.table()
        for entry in entries:
            whence = f"from {entry.source}"
            if entry.value is None:
                unset = f"{entry.key} is unset" + (f" # {whence}" if sources else "")
                table.add(tomlkit.comment(unset))
                continue
            value = _shown(entry)
            item = tomlkit.inline_table() if isinstance(value, dict) else tomlkit.item(value)
            if isinstance(value, dict):
                item.update(value)  # inline: a sub-table would leave its section
            if sources:
                item.comment(whence)
            table.add(entry.key, item)
        document.add(section, table)
    return tomlkit.dumps(document).rstrip()


@config_group.command("show", short_help="Print every setting in config-file form.")
@click.option("--sources", is_flag=True, help="Say where each value came from.")
@click.option("--output", "-o", type=click.Choice(["toml", "json", "yaml"]), default="toml",
              show_default=True, help="toml is the config file's form; json or yaml for "
              "scripts: {section: {key: value}}, typed, null when unset.")  # fmt: skip
@pass_state
def show_command(state: State, sources: bool, output: str) -> None:
    """Print every setting as TOML, the format of the config file (or as JSON or YAML:
    with --sources, each value is {value, source, layer})."""
    settings = state.settings()
    if output == "toml":
        click.echo(_as_toml(settings, sources))
        return
    found = {
        section: {
            e.key: {"value": _shown(e), "source": str(e.source), "layer": e.source.layer}
            if sources else _shown(e)
            for e in entries
        }
        for section, entries in _entries(settings).items()
    }  # fmt: skip
    click.echo(dumps(output, found))


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
