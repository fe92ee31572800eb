"""The CLI shell and housekeeping commands, in process (click's runner)."""

from __future__ import annotations

import tomllib

import click
import pytest
from click.testing import CliRunner

from spawnflow import __version__
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import settings_table
from spawnflow.commands import cli
from spawnflow.models import schema


def run(*args: str, env: dict[str, str] | None = None, input: str | None = None):
    return CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)


def assert_user_error(result, *fragments: str, exit_code: int = 1) -> str:
    """One 'Error:' line on stderr, the fragments in it, no traceback, a non-zero exit."""
    assert result.exit_code == exit_code, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def walk(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from walk(sub, (*path, name))


def test_every_command_has_help_text():
    for path, command in walk(cli):
        result = run(*path, "--help")
        assert result.exit_code == 0, path
        assert (command.help or "").strip(), path
        if path:
            assert command.short_help, path


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag):
    result = run(flag)
    assert result.exit_code == 0
    assert result.output.strip() == f"spawnflow, version {__version__}"


def test_info_shows_methods_components_paths_and_a_masked_database_url(home, monkeypatch):
    monkeypatch.setattr(platforms, "_current", platforms.LINUX)
    env = {"SPAWNFLOW__SCHEDULER__MP_START_METHOD": "spawn"}
    result = run("--database-url", "postgresql://admin:hunter2@db.example/flows", "info", env=env)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Start methods                 fork, forkserver (default), spawn" in out
    assert "Start method [core]           forkserver (from the default)" in out
    assert (
        "Start method [scheduler]      spawn (from environment variable "
        "SPAWNFLOW__SCHEDULER__MP_START_METHOD)"
    ) in out
    assert "Start method [executor]       forkserver (from [core])" in out
    assert (
        f"Config file                   {home / 'spawnflow.toml'} (not found; from SPAWNFLOW_HOME)"
        in out
    )
    assert f"Log directory                 {home / 'logs'}" in out
    assert "Database                      postgresql://admin:***@db.example/flows" in out
    assert "hunter2" not in out


def test_config_show_is_valid_toml_and_sources_say_where_values_came_from(home):
    home.mkdir()
    (home / "spawnflow.toml").write_text("[database]\nconnect_timeout = 4\n")
    env = {"SPAWNFLOW__LOGGING__LEVEL": "debug"}
    plain = run("--set", "core.stop_grace_period=2.5", "config", "show", env=env)
    assert plain.exit_code == 0
    parsed = tomllib.loads(plain.output)
    assert parsed["database"]["connect_timeout"] == 4
    assert parsed["logging"]["level"] == "DEBUG"
    assert parsed["core"]["stop_grace_period"] == 2.5

    sourced = run("--set", "core.stop_grace_period=2.5", "config", "show", "--sources", env=env)
    assert (
        f"connect_timeout = 4 # from config file {home / 'spawnflow.toml'} line 2" in sourced.output
    )
    assert 'level = "DEBUG" # from environment variable SPAWNFLOW__LOGGING__LEVEL' in sourced.output
    assert "stop_grace_period = 2.5 # from command-line option --set core.stop_grace_period" in (
        sourced.output
    )


def test_config_get_prints_one_value_and_suggests_on_a_typo():
    assert (
        run("--set", "core.mp_start_method=spawn", "config", "get", "core.mp_start_method").output
        == "spawn\n"
    )
    assert run("config", "get", "dag_processor.mp_start_method").output == "\n"
    result = run("config", "get", "core.mp_start_methd")
    assert_user_error(result, "did you mean 'core.mp_start_method'?", exit_code=2)


def test_config_reference_prints_the_settings_table():
    assert run("config", "reference").output.strip() == settings_table.render_markdown()


def test_db_migrate_check_and_reset(empty_database_url, db_backend):
    database_url = empty_database_url
    url = ("--database-url", database_url)
    unmigrated = run(*url, "db", "check")
    # A SQLite file that does not exist yet is reported, not created empty.
    missing = "does not exist" if db_backend == "sqlite" else "is not migrated"
    assert_user_error(unmigrated, missing, "run `spawnflow db migrate`")

    migrated = run(*url, "db", "migrate")
    assert migrated.exit_code == 0, migrated.output
    assert f"Migrated from empty to {schema.head()}" in migrated.output
    assert run(*url, "db", "migrate").output.startswith("Nothing to do")
    assert f"is at revision {schema.head()} (current)" in run(*url, "db", "check").output

    from sqlalchemy import create_engine, text

    from spawnflow.bootstrap.orm import normalize_url

    engine = create_engine(normalize_url(database_url))
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO job (job_type, state, hostname, pid, start_date, latest_heartbeat) "
                "VALUES ('scheduler', 'running', 'h', 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )

    def count() -> int:
        with engine.connect() as connection:
            return connection.execute(text("SELECT COUNT(*) FROM job")).scalar_one()

    declined = run(*url, "db", "reset", input="n\n")
    assert declined.exit_code == 1
    assert "Aborted" in declined.output
    assert count() == 1
    reset = run(*url, "db", "reset", "--yes")
    assert reset.exit_code == 0, reset.output
    assert count() == 0
    engine.dispose()


@pytest.mark.parametrize(
    ("args", "env", "fragments"),
    [
        (
            ["--start-method", "sapwn", "info"],
            {},
            [
                "[core] mp_start_method is 'sapwn' from command-line option --start-method",
                "must be one of fork, forkserver, spawn",
            ],
        ),
        (
            ["info"],
            {"SPAWNFLOW__CORE__MP_START_METHOD": "threads"},
            ["from environment variable SPAWNFLOW__CORE__MP_START_METHOD"],
        ),
        (
            ["info"],
            {"SPAWNFLOW__DATABASE__CONNECT_TIMEOUT": "soon"},
            ["[database] connect_timeout is 'soon'", "whole number of at least 1"],
        ),
        (
            ["--set", "logging.level=LOUD", "config", "show"],
            {},
            ["command-line option --set logging.level", "one of DEBUG, INFO, WARNING, ERROR"],
        ),
        (
            ["info"],
            {"SPAWNFLOW__CORE__NO_SUCH_KEY": "1"},
            ["The environment variable SPAWNFLOW__CORE__NO_SUCH_KEY names no setting"],
        ),
        (
            ["db", "check"],
            {"SPAWNFLOW__DATABASE__URL": "postgresql://postgres:pw@127.0.0.1:1/test"},
            [
                "Cannot connect to the database postgresql://postgres:***@127.0.0.1:1/test",
                "Connection refused",
            ],
        ),
    ],
)
def test_bad_settings_from_any_layer_are_one_clear_sentence(args, env, fragments, monkeypatch):
    monkeypatch.setattr(platforms, "_current", platforms.LINUX)
    assert_user_error(run(*args, env=env), *fragments)


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ('[core]\nmp_start_method = "spawn\n', ["is not valid TOML", "(at line 2"]),
        (
            "[core]\n\nparsing_processes = 2\n",
            ["line 3 has an unknown key 'parsing_processes' in [core]"],
        ),
        (
            '[database]\nconnect_timeout = "ten"\n',
            [
                "[database] connect_timeout is 'ten' from config file",
                "line 2, but it must be a whole number",
            ],
        ),
    ],
)
def test_config_file_mistakes_name_the_file_and_line(home, text, fragments):
    home.mkdir()
    path = home / "spawnflow.toml"
    path.write_text(text)
    error = assert_user_error(run("info"), *fragments)
    assert str(path) in error


def test_fork_is_refused_where_the_os_has_none(monkeypatch):
    monkeypatch.setattr(platforms, "_current", platforms.WINDOWS)
    assert_user_error(
        run("--start-method", "fork", "info"),
        "(Windows has no 'fork' start method), but it must be one of spawn.",
    )
    assert_user_error(
        run("doctor", "--method", "forkserver"),
        "Start method 'forkserver' is not available on Windows; this machine offers: spawn.",
    )


def test_a_malformed_set_is_a_usage_error():
    assert_user_error(
        run("--set", "loglevel", "info"), "'loglevel' is not SECTION.KEY=VALUE", exit_code=2
    )


def test_db_check_names_an_empty_database_as_not_migrated(tmp_path):
    import sqlite3

    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    result = run("--database-url", f"sqlite:///{path.as_posix()}", "db", "check")
    assert_user_error(result, f"is not migrated, but this spawnflow needs revision {schema.head()}")


@pytest.mark.parametrize(
    ("url", "fragments"),
    [
        ("postgres://admin:hunter2@db/flows", ["'postgres://admin:***@db/flows'"]),
        ("postgresql://u:hunter2@h:abc/db", ["its port is not a number"]),
        ("mysql://root:hunter2@127.0.0.1:1/t?bogus=1", ["is not usable", "bogus"]),
    ],
)
def test_database_urls_that_cannot_work_are_one_sentence_without_the_password(url, fragments):
    error = assert_user_error(run("db", "check", env={"SPAWNFLOW__DATABASE__URL": url}), *fragments)
    assert "hunter2" not in error


def test_a_setting_given_twice_on_the_command_line_is_refused():
    result = run("--start-method", "spawn", "--set", "core.mp_start_method=fork", "info")
    assert_user_error(result, "core.mp_start_method is set twice on the command line", exit_code=2)
