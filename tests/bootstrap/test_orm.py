"""The per-process engine registry, without child processes."""

from __future__ import annotations

import pytest

from spawnflow.bootstrap import orm


def test_engine_is_created_once_per_process_with_sqlite_pragmas(make_settings, tmp_path):
    make_settings(**{"database.url": f"sqlite:///{(tmp_path / 'x.db').as_posix()}"})
    first = orm.engine()
    assert orm.engine() is first
    assert orm.engines_of_other_processes() == 0
    with first.connect() as connection:
        journal = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
        foreign_keys = connection.exec_driver_sql("PRAGMA foreign_keys").scalar()
        busy = connection.exec_driver_sql("PRAGMA busy_timeout").scalar()
    assert (journal, foreign_keys, busy) == ("wal", 1, 30000)


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("postgresql://u:p@h/db", "postgresql+psycopg://u:***@h/db"),
        ("mysql://root@h/db", "mysql+pymysql://root@h/db"),
        ("mariadb://root@h/db", "mariadb+pymysql://root@h/db"),
        ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
        ("sqlite:///x.db", "sqlite:///x.db"),
    ],
)
def test_urls_get_the_drivers_spawnflow_ships(given, used):
    assert orm.masked(orm.normalize_url(given)) == used


def test_a_missing_driver_names_the_extra_to_install(make_settings):
    make_settings(**{"database.url": "postgresql+psycopg2://u@127.0.0.1/db"})
    with pytest.raises(orm.DatabaseUnavailable, match="needs the 'psycopg2' package"):
        orm.engine()


def test_an_unreachable_server_is_one_sentence_with_the_password_hidden(make_settings):
    make_settings(**{"database.url": "postgresql://postgres:secret@127.0.0.1:1/test"})
    with pytest.raises(orm.DatabaseUnavailable) as raised:
        orm.check_reachable()
    message = str(raised.value)
    assert message.startswith(
        "cannot connect to the database postgresql://postgres:***@127.0.0.1:1/test"
    )
    assert "secret" not in message
    assert "\n" not in message
