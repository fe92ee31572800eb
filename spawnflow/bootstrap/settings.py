"""Settings: resolved once in the top-level process, handed to children frozen.

Layers, lowest first: the defaults in :mod:`settings_table`, the TOML config file,
``SPAWNFLOW__SECTION__KEY`` environment variables, command-line options. The
result is a :class:`Settings` snapshot that remembers where each value came from.
A child never resolves settings itself: the launcher installs its parent's
snapshot (law 4), so a child agrees with its parent even if the environment or
the file changed in between.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import settings_table as table
from spawnflow.bootstrap.errors import UserError
from spawnflow.bootstrap.paths import Locations, locate

ENV_PREFIX = "SPAWNFLOW__"


class SettingsError(UserError):
    """A setting, config file or environment variable that spawnflow cannot use.

    The message is one sentence meant for the user, without a traceback.
    """

    def __init__(self, message: str):
        super().__init__(message if message.endswith((".", "?")) else message + ".")


class Source(msgspec.Struct, frozen=True):
    """Where a value came from: the layer and, for files, env and CLI, exactly where."""

    layer: str  # "default", "file", "env" or "cli"
    detail: str = ""

    def __str__(self) -> str:
        return {
            "default": "the default",
            "file": f"config file {self.detail}",
            "env": f"environment variable {self.detail}",
            "cli": f"command-line option {self.detail}",
        }[self.layer]


class Entry(msgspec.Struct, frozen=True):
    """One resolved setting."""

    section: str
    key: str
    value: Any
    source: Source


class Override(msgspec.Struct, frozen=True):
    """A value given on the command line for ``section.key``."""

    name: str
    value: str
    option: str


class _Section:
    __slots__ = ("_name", "_settings")

    def __init__(self, settings: Settings, name: str):
        self._settings, self._name = settings, name

    def __getattr__(self, key: str) -> Any:
        return self._settings.value(self._name, key)


class Settings:
    """A frozen, picklable snapshot of every setting and its source.

    ``settings.core.mp_start_method`` reads a value; :meth:`source` says where it
    came from; :attr:`locations` holds the folders and config file of the resolution.
    """

    __slots__ = ("_entries", "_index", "locations")
    # Declared so that reading them does not fall through to __getattr__ (a section).
    _entries: tuple[Entry, ...]
    _index: dict[tuple[str, str], Entry]
    locations: Locations

    def __init__(self, entries: Iterable[Entry], locations: Locations):
        entries = tuple(entries)
        object.__setattr__(self, "_entries", entries)
        object.__setattr__(self, "_index", {(e.section, e.key): e for e in entries})
        object.__setattr__(self, "locations", locations)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Settings are frozen; resolve a new snapshot instead")

    def __reduce__(self):
        return (Settings, (self._entries, self.locations))

    def __getattr__(self, section: str) -> _Section:
        if section in table.SECTIONS:
            return _Section(self, section)
        raise AttributeError(section)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Settings):
            return NotImplemented
        return self._entries == other._entries and self.locations == other.locations

    def __hash__(self) -> int:
        return hash(self._entries)

    def __repr__(self) -> str:
        return f"Settings({len(self._entries)} entries, config_file={self.locations.config_file})"

    def entry(self, section: str, key: str) -> Entry:
        try:
            return self._index[(section, key)]
        except KeyError:
            raise KeyError(f"[{section}] {key}") from None

    def value(self, section: str, key: str) -> Any:
        return self.entry(section, key).value

    def source(self, section: str, key: str) -> Source:
        return self.entry(section, key).source

    def entries(self) -> tuple[Entry, ...]:
        return self._entries

    def as_plain(self) -> dict[str, dict[str, Any]]:
        """Values as nested dicts of strings, numbers and booleans (for the wire)."""
        plain: dict[str, dict[str, Any]] = {}
        for e in self._entries:
            value = str(e.value) if isinstance(e.value, Path) else e.value
            plain.setdefault(e.section, {})[e.key] = value
        return plain


# -- resolution -----------------------------------------------------------------------


def resolve(
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Sequence[Override] = (),
    platform: platforms.Platform | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Resolve defaults < config file < environment < command line into a snapshot.

    Raises :class:`SettingsError` for a malformed or unknown entry in any layer.
    """
    environ = os.environ if environ is None else environ
    platform = platform or platforms.current()
    cwd = cwd or Path.cwd()
    locations = locate(environ)

    raw: dict[str, tuple[Any, Source, Path]] = {}
    raw.update(_read_config_file(locations.config_file))
    raw.update(_read_environment(environ, cwd))
    for override in overrides:
        option = _find(override.name, Source("cli", override.option))
        raw[option.name] = (override.value, Source("cli", override.option), cwd)

    entries = []
    for option in table.OPTIONS:
        if option.name in raw:
            value, source, base_dir = raw[option.name]
            value = _convert(option, value, source, table.Context(platform, base_dir))
        else:
            value, source = option.default_for(locations, platform), Source("default")
        entries.append(Entry(option.section, option.key, value, source))
    return Settings(entries, locations)


def _convert(option: table.Option, value: Any, source: Source, context: table.Context) -> Any:
    try:
        return option.kind.convert(value, context)
    except table.InvalidValue as invalid:
        reason = f" ({invalid.reason})" if invalid.reason else ""
        raise SettingsError(
            f"[{option.section}] {option.key} is {option.kind.show(value)} from {source}{reason}, "
            f"but it must be {invalid.allowed}."
        ) from None


def _find(name: str, source: Source | str) -> table.Option:
    section, _, key = name.partition(".")
    option = table.lookup(section, key)
    if option is None:
        hint = _did_you_mean(name, table.names())
        raise SettingsError(f"{source} names an unknown setting {name!r}{hint}")
    return option


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _read_environment(environ: Mapping[str, str], cwd: Path) -> dict:
    found = {}
    for variable, value in environ.items():
        if not variable.upper().startswith(ENV_PREFIX):
            continue
        section, _, key = variable[len(ENV_PREFIX) :].lower().partition("__")
        option = table.lookup(section, key)
        if option is None:
            hint = _did_you_mean(variable.upper(), [o.env_var for o in table.OPTIONS])
            hint = hint.replace("did you mean '", "did you mean ").replace("'?", "?")
            raise SettingsError(f"The environment variable {variable} names no setting{hint}")
        found[option.name] = (value, Source("env", variable), cwd)
    return found


def _read_config_file(path: Path) -> dict:
    import tomllib

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError:
        raise SettingsError(f"The config file {path} is not UTF-8 text.") from None
    except OSError as error:
        raise SettingsError(f"The config file {path} cannot be read: {error.strerror}.") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"The config file {path} is not valid TOML: {error}.") from None

    found = {}
    for section, values in document.items():
        where = _line_of(text, section, None)
        if section not in table.SECTIONS:
            hint = _did_you_mean(section, table.SECTIONS)
            raise SettingsError(
                f"The config file {path}{where} has an unknown section [{section}]{hint}"
            )
        if not isinstance(values, dict):
            raise SettingsError(
                f"The config file {path}{where} sets {section!r} to a value; "
                f"[{section}] must be a table."
            )
        for key, value in values.items():
            where = _line_of(text, section, key)
            option = table.lookup(section, key)
            if option is None:
                keys = [o.key for o in table.OPTIONS if o.section == section]
                raise SettingsError(
                    f"The config file {path}{where} has an unknown key {key!r} in "
                    f"[{section}]{_did_you_mean(key, keys)}"
                )
            source = Source("file", f"{path}{where}")
            found[option.name] = (value, source, path.parent)
    return found


_HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_.-]+)\s*\]\s*(#.*)?$")


def _line_of(text: str, section: str, key: str | None) -> str:
    """' line N' for ``[section]`` or its ``key``, when the file spells them plainly."""
    current = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            current = header.group(1)
            if key is None and current == section:
                return f" line {number}"
        elif (
            key is not None and current == section and re.match(rf"^\s*{re.escape(key)}\s*=", line)
        ):
            return f" line {number}"
    return ""


# -- the snapshot this process runs with -------------------------------------------------

_installed: Settings | None = None


def install(settings: Settings) -> None:
    """Make ``settings`` this process's snapshot (the CLI after resolving, a child at boot)."""
    global _installed
    _installed = settings


def restore(previous: Settings | None) -> None:
    """Put back what :func:`installed` returned earlier, None included (a test harness
    that installed settings of its own for a while)."""
    global _installed
    _installed = previous


def current() -> Settings:
    """This process's snapshot. Nothing resolves settings implicitly (law 4)."""
    if _installed is None:
        raise RuntimeError(
            "no settings are installed in this process: the top-level process resolves them "
            "with spawnflow.bootstrap.settings.resolve() and installs them; children get "
            "theirs from the launcher"
        )
    return _installed


def installed() -> Settings | None:
    """This process's snapshot, or None before one is installed."""
    return _installed
