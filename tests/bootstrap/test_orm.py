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


def _driver_connection(session):
    return session.connection().connection.dbapi_connection


def test_scopes_in_one_connection_share_it_and_each_commits(migrated_database):
    from sqlalchemy import func, select

    from spawnflow.models.run import Variable

    def stored() -> int:  # read through another connection, outside the block
        with orm.engine().connect() as other:
            return other.scalar(select(func.count()).select_from(Variable))

    with orm.one_connection():
        with orm.session_scope() as session:
            session.add(Variable(key="a", value="1"))
            first = _driver_connection(session)
        assert stored() == 1
        with orm.session_scope(write=False) as session:
            assert _driver_connection(session) is first
            with orm.session_scope() as inner:  # opened while the outer scope is open
                assert _driver_connection(inner) is not first
                inner.add(Variable(key="b", value="2"))
            assert stored() == 2
        try:
            with orm.session_scope() as session:
                session.add(Variable(key="c", value="3"))
                raise LookupError("the unit of work fails")
        except LookupError:
            pass
        assert stored() == 2
        with orm.session_scope() as session:
            assert session.get(Variable, "c") is None
            assert _driver_connection(session) is first


def test_sqlite_scopes_in_one_connection_still_begin_as_their_kind(make_settings, tmp_path):
    from sqlalchemy import event

    make_settings(**{"database.url": f"sqlite:///{(tmp_path / 'x.db').as_posix()}"})
    begins: list[str] = []

    def seen(_conn, _cursor, statement, *_):
        if statement.startswith("BEGIN"):
            begins.append(statement)

    event.listen(orm.engine(), "before_cursor_execute", seen)
    with orm.one_connection():
        for write in (True, False, True):
            with orm.session_scope(write=write) as session:
                session.connection()
    assert begins == ["BEGIN IMMEDIATE", "BEGIN", "BEGIN IMMEDIATE"]


def test_end_interrupted_work_rolls_back_what_a_stop_left_open_in_this_thread(
    migrated_database,
):
    """A unit of work a stop cut short keeps its transaction, and its locks, while its
    connection lives; ending it rolls the write back and frees the row for the next
    unit of work. A connection another thread holds is left alone."""
    import threading

    from sqlalchemy import select, text

    from spawnflow.models.run import Variable

    with orm.session_scope() as session:
        session.add(Variable(key="k", value="before"))
    elsewhere: list = []
    opened = threading.Thread(target=lambda: elsewhere.append(orm.engine().connect()))
    opened.start()
    opened.join()
    left_open = orm.engine().connect()  # as a traceback keeps it alive
    left_open.begin()
    left_open.execute(Variable.__table__.update().values(value="half-written"))

    assert orm.end_interrupted_work() == 1
    with orm.engine().connect() as probe:
        # Bound the wait for a lock left behind: the failure this test looks for.
        statement = {
            "postgresql": "SET lock_timeout = '10s'",
            "mysql": "SET SESSION innodb_lock_wait_timeout = 10",
            "sqlite": "PRAGMA busy_timeout=10000",
        }[probe.dialect.name]
        probe.execute(text(statement))
        probe.commit()
        with probe.begin():
            assert probe.scalar(select(Variable.value)) == "before"
            probe.execute(Variable.__table__.update().values(value="after"))
    assert elsewhere[0].scalar(select(Variable.value)) == "after"  # still usable
    elsewhere[0].close()
    left_open.close()
