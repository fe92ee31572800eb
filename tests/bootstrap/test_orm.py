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


@pytest.mark.parametrize(
    "cut_off", ["inside execute", "in a write still out of the pool", "after its rollback"]
)
def test_a_statement_a_stop_cut_off_mid_rows_leaves_no_lock_behind(migrated_database, cut_off):
    """A stop can cut a query off in the middle of its rows, and the traceback keeps its
    cursor while ``finally`` blocks run. On SQLite the statement holds a transaction:
    closing its connection under it (SQLAlchemy does, when the stop lands inside
    ``execute``; :func:`orm.end_interrupted_work` does) left SQLite keeping the
    connection and its write lock; and after the rollback of its unit of work it kept a
    read transaction, on which every later write of that pooled connection failed at
    once ("database is locked": the scheduler that could not record its cold stop)."""
    import sqlalchemy as sa
    from sqlalchemy import event, select

    from spawnflow.bootstrap import lifecycle
    from spawnflow.models.run import Variable

    with orm.session_scope() as session:
        session.add_all(Variable(key=f"k{i}", value="before") for i in range(5))
    kept: list = []  # what the traceback of a stop keeps alive
    if cut_off == "inside execute":
        left_open = orm.engine().connect()
        left_open.begin()
        left_open.execute(Variable.__table__.update().values(value="half-written"))

        def stop_after_select(conn, cursor, statement, *_) -> None:
            if statement.startswith("SELECT"):  # the first row is read: rows are left
                raise lifecycle.WarmStop()  # as a second stop request does

        event.listen(left_open, "after_cursor_execute", stop_after_select)
        with pytest.raises(lifecycle.WarmStop) as stopped:
            left_open.execute(select(Variable.key))
        kept.append(stopped)
        assert left_open.invalidated  # by SQLAlchemy, on the way out
    elif cut_off == "in a write still out of the pool":
        left_open = orm.engine().connect()
        left_open.begin()
        left_open.execute(Variable.__table__.update().values(value="half-written"))
        kept.append(left_open.execute(select(Variable.key)))
        kept[0].fetchone()
        assert orm.end_interrupted_work() == 1
    else:

        def read_until_stopped() -> None:
            with orm.session_scope(write=False) as session:
                # (The ORM fetches every row at once; SQLAlchemy Core row by row.)
                kept.append(session.connection().execute(select(Variable.key)))
                kept[0].fetchone()
                raise lifecycle.WarmStop()

        with pytest.raises(lifecycle.WarmStop):
            read_until_stopped()
        # Another process writes meanwhile: the statement's snapshot is now behind.
        other = sa.create_engine(migrated_database.database.url)
        try:
            with other.begin() as connection:
                connection.execute(Variable.__table__.update().values(value="elsewhere"))
        finally:
            other.dispose()

    # A lock left behind makes this wait out [database] sqlite_busy_timeout, then fail.
    with orm.session_scope() as session:
        bound = {"postgresql": "SET LOCAL lock_timeout = '10s'",
                 "mysql": "SET SESSION innodb_lock_wait_timeout = 10"}  # fmt: skip
        if session.get_bind().dialect.name in bound:
            session.execute(sa.text(bound[session.get_bind().dialect.name]))
        session.execute(Variable.__table__.update().values(value="after"))
    with orm.session_scope(write=False) as session:
        assert set(session.scalars(select(Variable.value))) == {"after"}
