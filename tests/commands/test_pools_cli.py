"""``spawnflow pools ...`` from the CLI."""

from __future__ import annotations

import json

import pytest

from tests.commands.test_cli import assert_user_error, run


@pytest.fixture
def migrated(home):
    assert run("db", "migrate").exit_code == 0


def test_default_pool_is_listed_with_128_slots(migrated):
    listed = run("pools", "list", "-o", "json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == [{
        "pool": "default_pool", "slots": 128, "occupied": 0, "description": "Default pool",
        "include_deferred": False,
    }]  # fmt: skip


def test_a_pool_is_created_changed_shown_and_deleted(migrated):
    created = run("pools", "set", "etl", "4", "--description", "the warehouse loads")
    assert created.exit_code == 0, created.output
    assert "Pool 'etl' created with 4 slots." in created.stdout
    changed = run("pools", "set", "etl", "2", "--include-deferred")
    assert "Pool 'etl' updated with 2 slots." in changed.stdout
    shown = json.loads(run("pools", "get", "etl", "-o", "json").stdout)
    assert shown == {"pool": "etl", "slots": 2, "occupied": 0,
                     "description": "the warehouse loads", "include_deferred": True}  # fmt: skip
    table = run("pools", "get", "etl").stdout
    assert "the warehouse loads" in table
    assert "etl" in run("pools", "list").stdout
    assert run("pools", "delete", "etl").exit_code == 0
    assert "etl" not in run("pools", "list").stdout


def test_a_pool_of_zero_slots_is_allowed(migrated):
    assert run("pools", "set", "paused", "0").exit_code == 0
    assert json.loads(run("pools", "get", "paused", "-o", "json").stdout)["slots"] == 0


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["set", "etl", "-1"], ["Pool 'etl': slots -1 must be 0 (paused) or more"]),
        (["delete", "default_pool"], ["'default_pool' cannot be deleted"]),
        (["get", "nowhere"], ["There is no pool 'nowhere'", "spawnflow pools list"]),
        (["delete", "nowhere"], ["There is no pool 'nowhere'"]),
    ],
)
def test_bad_pool_commands_fail_with_one_sentence(migrated, args, fragments):
    assert_user_error(run("pools", *args), *fragments)


def test_slots_that_are_not_a_number_are_a_usage_error(migrated):
    result = run("pools", "set", "etl", "many")
    assert result.exit_code == 2
    assert "'many' is not a valid integer" in result.stderr
    assert "Traceback" not in result.output
