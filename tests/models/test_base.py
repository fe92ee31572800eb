"""``one_of``: the same rows as ``IN`` on every database, one array parameter on PostgreSQL."""

from __future__ import annotations

from sqlalchemy import event, select

from spawnflow.bootstrap import orm
from spawnflow.models.base import one_of
from spawnflow.models.dag import DagModel


def test_one_of_finds_what_in_finds_with_one_parameter_on_postgresql(migrated_database,
                                                                     db_backend):  # fmt: skip
    names = [f"dag_{n}" for n in range(300)]
    with orm.session_scope() as session:
        session.add_all(DagModel(dag_id=name, fileloc="/x.py") for name in names)
    sent: list[str] = []

    def note(_connection, _cursor, statement, *_args) -> None:
        sent.append(statement)

    event.listen(orm.engine(), "before_cursor_execute", note)
    try:
        with orm.session_scope(write=False) as session:
            found = session.scalars(
                select(DagModel.dag_id).where(one_of(session, DagModel.dag_id, names[::3]))
            ).all()
    finally:
        event.remove(orm.engine(), "before_cursor_execute", note)
    assert sorted(found) == sorted(names[::3])
    (statement,) = [s for s in sent if "FROM dag" in s]
    if db_backend == "postgres":
        assert "= ANY (" in statement
        assert statement.count("%(") == 1  # one parameter, not one per name
    else:
        assert " IN (" in statement
