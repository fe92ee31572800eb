"""Where spawnflow keeps its files on each OS.

``SPAWNFLOW_HOME`` puts everything under one folder (handy for tests and for a
project-local setup). Without it the folders come from platformdirs, which knows
each OS's convention: ``~/.local/share/spawnflow`` and ``~/.config/spawnflow`` on
Linux, ``~/Library/Application Support/spawnflow`` on macOS,
``%LOCALAPPDATA%\\spawnflow`` on Windows. ``SPAWNFLOW_CONFIG`` names the config file
directly, like ``AIRFLOW_CONFIG``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

import msgspec

from spawnflow.bootstrap.errors import UserError

APP_NAME = "spawnflow"
CONFIG_FILE_NAME = "spawnflow.toml"
HOME_VARIABLE = "SPAWNFLOW_HOME"
CONFIG_VARIABLE = "SPAWNFLOW_CONFIG"


class Locations(msgspec.Struct, frozen=True):
    """The folders and config file of one resolution, and why each was chosen."""

    home: Path | None
    config_file: Path
    config_file_origin: str
    data_dir: Path
    log_dir: Path

    @property
    def default_database_file(self) -> Path:
        return self.data_dir / "spawnflow.db"

    @property
    def default_dags_folder(self) -> Path:
        return self.data_dir / "dags"


def locate(environ: Mapping[str, str] | None = None) -> Locations:
    """Work out the folders from ``SPAWNFLOW_HOME``/``SPAWNFLOW_CONFIG`` or platformdirs."""
    environ = os.environ if environ is None else environ
    home_value = environ.get(HOME_VARIABLE)
    if home_value:
        home = Path(home_value).expanduser().absolute()
        data_dir, log_dir = home, home / "logs"
        config_file, origin = home / CONFIG_FILE_NAME, HOME_VARIABLE
    else:
        import platformdirs

        home = None
        data_dir = platformdirs.user_data_path(APP_NAME, appauthor=False)
        log_dir = platformdirs.user_log_path(APP_NAME, appauthor=False)
        config_file = platformdirs.user_config_path(APP_NAME, appauthor=False) / CONFIG_FILE_NAME
        origin = "the user config directory"
    config_value = environ.get(CONFIG_VARIABLE)
    if config_value:
        config_file, origin = Path(config_value).expanduser().absolute(), CONFIG_VARIABLE
    return Locations(
        home=home,
        config_file=config_file,
        config_file_origin=origin,
        data_dir=data_dir,
        log_dir=log_dir,
    )


#: Longest id kept readable in a folder name: with the hash, the three ids of an
#: attempt log's path stay far below Windows' 260 characters.
_READABLE = 32
_SAFE_EVERYWHERE = re.compile(r"[a-z0-9_.-]+")


def folder_name(key: str, value: str) -> str:
    """``key=value`` as a folder name that names one thing on every OS.

    ``value`` is kept as it is when it is safe everywhere: lowercase letters, digits,
    ``_``, ``-`` and ``.``, not ending in ``.``, at most 32 characters. Otherwise other
    characters become ``_``, the text is cut to 32, and ``~`` with 8 hex digits of the
    value's hash tells apart values that would meet on disk: ``ETL`` and ``etl`` on a
    case-insensitive file system (macOS's and Windows' defaults), ``a.`` and ``a``
    (Windows drops a trailing dot), ``a:b`` and ``a_b``, two long ids with one start.
    """
    if _SAFE_EVERYWHERE.fullmatch(value) and not value.endswith(".") and len(value) <= _READABLE:
        return f"{key}={value}"
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", value)[:_READABLE].rstrip(".")
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:8]
    return f"{key}={readable}~{digest}"


class FolderUnwritable(UserError):
    """A folder spawnflow must write to cannot be written (read-only, full, not a folder)."""


def require_writable_folder(folder: Path, what: str, setting: str | None = None) -> None:
    """Create ``folder`` if needed and check that a file can be written in it.

    Creating a file is the only check every OS answers truthfully: permission bits say
    nothing on a read-only mount, to root, or under Windows ACLs.

    Raises:
        FolderUnwritable: one sentence naming the folder, why, and what to do.
    """
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        instead = f" or set {setting} to one that is" if setting else ""
        raise FolderUnwritable(
            f"cannot write to the {what} {folder} ({error.strerror or type(error).__name__}); "
            f"make it writable{instead}"
        ) from None
