"""The declarative base, with constraint names that are the same on every database."""

from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

# Named constraints let Alembic alter and drop them on SQLite, PostgreSQL and MySQL alike.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Base class of every spawnflow table."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
