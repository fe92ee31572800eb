"""``--output json|yaml`` of the listing commands (issue 15): every field, typed, times
in RFC 3339 UTC, nothing shortened, an empty list when there is nothing."""

from __future__ import annotations

import json

import pytest
import yaml

from spawnflow.bootstrap import orm
from spawnflow.models.run import Variable
from tests.commands.test_cli import run


def listed(env: dict[str, str], *command: str, output: str = "json") -> list[dict]:
    result = run(*command, "--output", output, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if output == "json" else yaml.safe_load(result.stdout)


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_the_listings_print_typed_records(one_run, output):
    assert listed(one_run, "dags", "list", output=output) == [{
        "dag_id": "listed", "schedule": "@daily", "is_paused": True, "is_active": True,
        "tags": ["a", "b"], "fileloc": "/dags/listed.py",
    }]  # fmt: skip
    assert listed(one_run, "runs", "list", output=output) == [{
        "dag_id": "listed", "run_id": "r1", "run_type": "manual", "state": "success",
        "logical_date": "2026-01-02T03:04:05Z", "start_date": "2026-01-02T03:04:05Z",
        "end_date": None,
    }]  # fmt: skip
    assert listed(one_run, "tasks", "states", "listed", "r1", output=output) == [{
        "task_id": "only", "state": "failed", "try_number": 2,
        "start_date": "2026-01-02T03:04:05Z", "end_date": "2026-01-02T03:04:14Z",
        "reason": "boom",
    }]  # fmt: skip


def test_a_long_value_is_shortened_in_the_table_only(one_run, database_url):
    long = "x" * 100
    with orm.session_scope(database_url) as session:
        session.add(Variable(key="big", value=long))

    assert listed(one_run, "variables", "list") == [
        {"key": "big", "value": long, "description": None}
    ]
    table = run("variables", "list", env=one_run).stdout
    assert long not in table
    assert "x" * 57 + "..." in table


def test_nothing_to_list_is_an_empty_list_for_a_script(one_run):
    assert listed(one_run, "connections", "list") == []
    assert listed(one_run, "dags", "report") == []
    assert run("connections", "list", env=one_run).stdout.strip() == "No Connections."
