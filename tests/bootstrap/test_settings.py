"""Settings: layers, sources, errors, the frozen snapshot."""

from __future__ import annotations

import pickle
from pathlib import Path

import platformdirs
import pytest

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import settings_table
from spawnflow.bootstrap.settings import Override, Settings, SettingsError, Source, resolve


def write_config(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "spawnflow.toml"
    path.write_text(text)
    return path


def test_layers_apply_in_order_and_each_value_remembers_its_source(home):
    config = write_config(
        home,
        '[core]\nstop_grace_period = 3\nmp_start_method = "spawn"\n'
        '[database]\nconnect_timeout = 4\n[logging]\nlevel = "ERROR"\n',
    )
    environ = {
        "SPAWNFLOW_HOME": str(home),
        "SPAWNFLOW__DATABASE__CONNECT_TIMEOUT": "5",
        "SPAWNFLOW__LOGGING__LEVEL": "debug",
    }
    snapshot = resolve(
        environ=environ,
        overrides=[Override("logging.level", "warning", "--log-level")],
        platform=platforms.LINUX,
    )
    assert snapshot.core.stop_grace_period == 3.0
    assert snapshot.source("core", "stop_grace_period") == Source("file", f"{config} line 2")
    assert snapshot.core.mp_start_method == "spawn"
    assert snapshot.database.connect_timeout == 5
    assert str(snapshot.source("database", "connect_timeout")) == (
        "environment variable SPAWNFLOW__DATABASE__CONNECT_TIMEOUT"
    )
    assert snapshot.logging.level == "WARNING"
    assert str(snapshot.source("logging", "level")) == "command-line option --log-level"
    assert snapshot.database.sqlite_busy_timeout == 30.0
    assert snapshot.source("database", "sqlite_busy_timeout") == Source("default")


def test_spawnflow_home_holds_config_data_logs_dags_and_database(home):
    snapshot = resolve(environ={"SPAWNFLOW_HOME": str(home)}, platform=platforms.LINUX)
    assert snapshot.locations.config_file == home / "spawnflow.toml"
    assert snapshot.core.dags_folder == home / "dags"
    assert snapshot.logging.base_log_folder == home / "logs"
    assert snapshot.database.url == f"sqlite:///{(home / 'spawnflow.db').as_posix()}"


def test_without_a_home_the_folders_come_from_platformdirs():
    snapshot = resolve(environ={}, platform=platforms.LINUX)
    data = platformdirs.user_data_path("spawnflow", appauthor=False)
    assert snapshot.locations.home is None
    assert snapshot.core.dags_folder == data / "dags"
    assert snapshot.logging.base_log_folder == platformdirs.user_log_path(
        "spawnflow", appauthor=False
    )
    assert snapshot.locations.config_file == (
        platformdirs.user_config_path("spawnflow", appauthor=False) / "spawnflow.toml"
    )


def test_spawnflow_config_names_the_file_and_relative_paths_follow_it(home, tmp_path):
    config = tmp_path / "elsewhere" / "my.toml"
    config.parent.mkdir()
    config.write_text('[core]\ndags_folder = "my_dags"\n')
    environ = {"SPAWNFLOW_HOME": str(home), "SPAWNFLOW_CONFIG": str(config)}
    snapshot = resolve(environ=environ, cwd=tmp_path)
    assert snapshot.locations.config_file == config
    assert snapshot.core.dags_folder == config.parent / "my_dags"
    from_env = resolve(
        environ={**environ, "SPAWNFLOW__CORE__DAGS_FOLDER": "env_dags"}, cwd=tmp_path
    )
    assert from_env.core.dags_folder == tmp_path / "env_dags"


def test_default_start_method_follows_the_platform():
    for platform, method in (
        (platforms.LINUX, "forkserver"),
        (platforms.MACOS, "spawn"),
        (platforms.WINDOWS, "spawn"),
    ):
        assert resolve(environ={}, platform=platform).core.mp_start_method == method


def test_snapshot_is_frozen_picklable_and_equal_after_a_round_trip(home):
    snapshot = resolve(environ={"SPAWNFLOW_HOME": str(home)})
    with pytest.raises(AttributeError):
        snapshot.locations = None
    copy = pickle.loads(pickle.dumps(snapshot))
    assert copy == snapshot
    assert copy.entries() == snapshot.entries()
    assert isinstance(copy, Settings)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[core\nx = 1\n",
            "is not valid TOML: Expected ']' at the end of a table declaration (at line 1",
        ),
        (
            '[core]\nmp_start_method = "spawn"\nstop_grace = 3\n',
            "line 3 has an unknown key 'stop_grace' in [core]; did you mean 'stop_grace_period'?",
        ),
        ("[cor]\nx = 1\n", "line 1 has an unknown section [cor]; did you mean 'core'?"),
        ("core = 3\n", "sets 'core' to a value; [core] must be a table"),
        (
            '[core]\nstop_grace_period = "soon"\n',
            "[core] stop_grace_period is 'soon' from config file {path} line 2, but it must be a "
            "number of seconds from 0 to 604800",
        ),
        (
            "[database]\nconnect_timeout = true\n",
            "[database] connect_timeout is True from config file {path} line 2, but it must be a "
            "whole number of at least 1",
        ),
    ],
)
def test_config_file_mistakes_name_the_file_and_line(home, text, expected):
    path = write_config(home, text)
    with pytest.raises(SettingsError) as raised:
        resolve(environ={"SPAWNFLOW_HOME": str(home)})
    message = str(raised.value)
    assert str(path) in message
    assert expected.format(path=path) in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {"SPAWNFLOW__CORE__MP_START_METHOD": "sapwn"},
            "[core] mp_start_method is 'sapwn' from environment variable "
            "SPAWNFLOW__CORE__MP_START_METHOD, but it must be one of fork, forkserver, spawn.",
        ),
        (
            {"SPAWNFLOW__CORE__MP_START_METHD": "spawn"},
            "The environment variable SPAWNFLOW__CORE__MP_START_METHD names no setting; did you "
            "mean SPAWNFLOW__CORE__MP_START_METHOD?",
        ),
        (
            {"SPAWNFLOW__DATABASE__URL": "oracle://x"},
            "[database] url is 'oracle://x' from environment variable SPAWNFLOW__DATABASE__URL, "
            "but it must be a database URL starting sqlite://, postgresql://, mysql:// or mariadb://.",
        ),
    ],
)
def test_environment_mistakes_name_the_variable(home, environ, expected):
    with pytest.raises(SettingsError) as raised:
        resolve(environ={"SPAWNFLOW_HOME": str(home), **environ}, platform=platforms.LINUX)
    assert str(raised.value) == expected


def test_command_line_mistakes_name_the_option(home):
    with pytest.raises(SettingsError, match=r"command-line option --set core.x names an unknown"):
        resolve(
            environ={"SPAWNFLOW_HOME": str(home)},
            overrides=[Override("core.x", "1", "--set core.x")],
        )
    with pytest.raises(SettingsError, match=r"is 'many' from command-line option --set"):
        resolve(
            environ={"SPAWNFLOW_HOME": str(home)},
            overrides=[
                Override("database.connect_timeout", "many", "--set database.connect_timeout")
            ],
        )


def test_fork_is_refused_where_the_os_has_none_with_the_methods_it_has(home):
    with pytest.raises(SettingsError) as raised:
        resolve(
            environ={"SPAWNFLOW_HOME": str(home), "SPAWNFLOW__SCHEDULER__MP_START_METHOD": "fork"},
            platform=platforms.WINDOWS,
        )
    assert str(raised.value) == (
        "[scheduler] mp_start_method is 'fork' from environment variable "
        "SPAWNFLOW__SCHEDULER__MP_START_METHOD (Windows has no 'fork' start method), "
        "but it must be one of spawn."
    )


@pytest.mark.parametrize(
    ("key", "what"),
    [("executor.parallelism", "worker"), ("dag_processor.parsing_processes", "parsing")],
)
def test_more_children_than_windows_can_wait_on_is_a_settings_error(home, key, what):
    # Windows' WaitForMultipleObjects watches 63 objects from the main thread; each child
    # adds its channel and its sentinel to its parent's wait.
    section, name = key.split(".")
    variable = f"SPAWNFLOW__{section.upper()}__{name.upper()}"
    environ = {"SPAWNFLOW_HOME": str(home), variable: "32"}
    with pytest.raises(SettingsError) as raised:
        resolve(environ=environ, platform=platforms.WINDOWS)
    assert str(raised.value) == (
        f"[{section}] {name} is '32' from environment variable {variable} (Windows waits on "
        f"at most 63 objects at once, two per {what} process), but it must be a whole "
        "number from 1 to 31."
    )
    assert resolve(environ={**environ, variable: "31"}, platform=platforms.WINDOWS)
    assert resolve(environ={**environ, variable: "64"}, platform=platforms.LINUX)


def test_an_empty_component_method_means_core(home):
    snapshot = resolve(
        environ={"SPAWNFLOW_HOME": str(home), "SPAWNFLOW__EXECUTOR__MP_START_METHOD": ""},
        platform=platforms.LINUX,
    )
    assert snapshot.executor.mp_start_method is None


def test_readme_settings_table_is_generated_from_the_table():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert settings_table.render_markdown() in readme
    for option in settings_table.OPTIONS:
        assert option.env_var in readme
