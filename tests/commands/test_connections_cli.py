"""``spawnflow connections ...`` from the CLI."""

from __future__ import annotations

import pytest

from tests.commands.test_cli import assert_user_error, run


@pytest.fixture
def migrated(home):
    assert run("db", "migrate").exit_code == 0


def test_a_connection_added_from_a_uri_is_shown_without_its_password(migrated):
    added = run("connections", "add", "warehouse", "--uri",
                "postgres://ada:s%40cret@db.example:5433/sales?sslmode=require")  # fmt: skip
    assert added.exit_code == 0, added.output
    shown = run("connections", "get", "warehouse")
    assert shown.exit_code == 0, shown.output
    fields = dict(line.split(None, 1) for line in shown.stdout.splitlines() if " " in line.strip())
    assert fields["conn_type"] == "postgres"
    assert fields["host"] == "db.example"
    assert fields["port"] == "5433"
    assert fields["login"] == "ada"
    assert fields["password"] == "***"
    assert fields["schema"] == "sales"
    assert "s@cret" not in shown.stdout

    from spawnflow.services.connections import read_connection

    assert read_connection("warehouse").password == "s@cret"
    assert read_connection("warehouse").extra == {"sslmode": "require"}


def test_connections_list_and_delete(migrated):
    assert run("connections", "add", "api", "--conn-type", "http", "--host", "api.example",
               "--extra", '{"timeout": 5}', "--description", "the API").exit_code == 0  # fmt: skip
    listed = run("connections", "list")
    assert "api" in listed.stdout
    assert "the API" in listed.stdout
    assert run("connections", "delete", "api").exit_code == 0
    assert run("connections", "list").stdout.strip() == "No Connections."
    assert_user_error(run("connections", "get", "api"), "There is no Connection 'api'")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--conn-type", "http", "--extra", "{not json"], "The --extra option is not valid JSON"),
        (["--conn-type", "http", "--extra", "[1]"], "must be a JSON object, not list"),
        (["--uri", "http://h", "--conn-type", "http"], "either --uri or --conn-type, not both"),
        ([], "Give the Connection's --uri or its --conn-type"),
        (["--uri", "no-type-here"], "has no type"),
        (["--uri", "http://h:notaport/"], "has a port that is not a number"),
    ],
)
def test_bad_connection_input_is_one_sentence(migrated, args, fragment):
    assert_user_error(run("connections", "add", "bad", *args), fragment)
    assert run("connections", "list").stdout.strip() == "No Connections."


def test_adding_a_connection_twice_is_refused(migrated):
    assert run("connections", "add", "x", "--conn-type", "fs").exit_code == 0
    assert_user_error(run("connections", "add", "x", "--conn-type", "fs"), "exists")
