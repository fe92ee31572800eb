"""The declarative base, with constraint names that are the same on every database."""

from collections.abc import Iterable
from typing import Any

from sqlalchemy import MetaData, String, any_, literal
from sqlalchemy.dialects import mysql
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import DeclarativeBase, Session

# Named constraints let Alembic alter and drop them on SQLite, PostgreSQL and MySQL alike.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


#: Names users choose (Dag, run and task ids, keys): compared case-sensitively on every
#: database. MySQL and MariaDB compare text case-insensitively by default, which would
#: make ``Sales`` and ``sales`` one Dag.
Identifier = String(250).with_variant(
    mysql.VARCHAR(250, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
)


class Base(DeclarativeBase):
    """Base class of every spawnflow table."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def one_of(session: Session, column: Any, values: Iterable[Any]) -> Any:
    """``column IN (values)``, for many values: on PostgreSQL ``column = ANY(:array)``,
    one parameter, where ``IN`` renders (and the driver parses) a placeholder per value on
    every execution: with 500 ids a scheduler loop spent about as long on that as on the
    server's work. Other databases get the plain ``IN``."""
    values = list(values)
    if session.get_bind().dialect.name == "postgresql":
        return column == any_(literal(values, ARRAY(column.type)))
    return column.in_(values)
