"""Where spawnflow keeps its files on each OS.

``SPAWNFLOW_HOME`` puts everything under one folder (handy for tests and for a
project-local setup). Without it the folders come from platformdirs, which knows
each OS's convention: ``~/.local/share/spawnflow`` and ``~/.config/spawnflow`` on
Linux, ``~/Library/Application Support/spawnflow`` on macOS,
``%LOCALAPPDATA%\\spawnflow`` on Windows. ``SPAWNFLOW_CONFIG`` names the config file
directly, like ``AIRFLOW_CONFIG``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

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
