"""Migration 0013: the task instance's map index, up and down, keeping what is stored."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from alembic import command

from spawnflow.bootstrap import orm
from spawnflow.models import schema

NOW = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)


def _migrate(url: str, revision: str, down: bool = False) -> None:
    with orm.engine(url).begin() as connection:
        (command.downgrade if down else command.upgrade)(schema._config(connection), revision)


def _table(connection, name: str) -> sa.Table:
    return sa.Table(name, sa.MetaData(), autoload_with=connection)


def _insert_run_with_a_task_and_its_xcom(url: str) -> None:
    with orm.engine(url).begin() as connection:
        connection.execute(_table(connection, "dag").insert().values(
            dag_id="d", fileloc="d.py", is_paused=False, is_active=True, schedule="",
            tags="[]", max_active_runs=1, max_active_tasks=1,
        ))  # fmt: skip
        connection.execute(_table(connection, "dag_run").insert().values(
            id=1, dag_id="d", run_id="r", run_type="manual", state="running",
            logical_date=NOW, conf="{}", created_at=NOW,
        ))  # fmt: skip
        connection.execute(_table(connection, "task_instance").insert().values(
            id=1, dag_run_id=1, dag_id="d", task_id="t", state="success", try_number=1,
            max_tries=0,
        ))  # fmt: skip
        connection.execute(_table(connection, "xcom").insert().values(
            task_instance_id=1, key="return_value", value="[1, 2]", created_at=NOW
        ))  # fmt: skip


def _rows(url: str, name: str, *columns: str) -> list[tuple]:
    with orm.engine(url).connect() as connection:
        table = _table(connection, name)
        query = sa.select(*(table.c[column] for column in columns)).order_by(table.c.id)
        return [tuple(row) for row in connection.execute(query)]


def test_upgrading_gives_existing_task_instances_map_index_minus_one_and_keeps_xcoms(
    migrated_database, database_url
):
    _migrate(database_url, "0012", down=True)
    _insert_run_with_a_task_and_its_xcom(database_url)
    _migrate(database_url, "0013")
    assert _rows(database_url, "task_instance", "task_id", "map_index") == [("t", -1)]
    # SQLite rebuilds the table to change its unique key: the rows that refer to it stay.
    assert _rows(database_url, "xcom", "task_instance_id", "value") == [(1, "[1, 2]")]


def test_the_unique_key_holds_one_instance_per_map_index(migrated_database, database_url):
    _migrate(database_url, "0012", down=True)
    _insert_run_with_a_task_and_its_xcom(database_url)
    _migrate(database_url, "0013")
    with orm.engine(database_url).begin() as connection:
        table = _table(connection, "task_instance")
        row = {"dag_run_id": 1, "dag_id": "d", "task_id": "m", "state": "success",
               "try_number": 1, "max_tries": 0}  # fmt: skip
        connection.execute(table.insert().values(id=2, map_index=0, **row))
        connection.execute(table.insert().values(id=3, map_index=1, **row))
    with pytest.raises(sa.exc.IntegrityError), orm.engine(database_url).begin() as connection:
        connection.execute(table.insert().values(id=4, map_index=1, **row))


def test_downgrading_drops_the_expanded_instances_and_keeps_the_rest(
    migrated_database, database_url
):
    _migrate(database_url, "0012", down=True)
    _insert_run_with_a_task_and_its_xcom(database_url)
    _migrate(database_url, "0013")
    with orm.engine(database_url).begin() as connection:
        table = _table(connection, "task_instance")
        for number in range(2):
            connection.execute(table.insert().values(
                id=10 + number, dag_run_id=1, dag_id="d", task_id="m", map_index=number,
                state="success", try_number=1, max_tries=0,
            ))  # fmt: skip
        connection.execute(_table(connection, "xcom").insert().values(
            task_instance_id=10, key="return_value", value="1", created_at=NOW
        ))  # fmt: skip
    _migrate(database_url, "0012", down=True)
    assert _rows(database_url, "task_instance", "id", "task_id") == [(1, "t")]
    assert _rows(database_url, "xcom", "task_instance_id", "value") == [(1, "[1, 2]")]
    _migrate(database_url, "head")
    assert schema.status(database_url).up_to_date
