"""Core views of the tables that the listing commands read, without the ORM.

Importing ``sqlalchemy.orm`` and declaring the models costs a command more CPU than
everything else it does; ``dags list``, ``runs list`` and ``tasks states`` only read
rows, so they select from these lightweight ``table()`` clauses instead, and so do
shell completion and the error for an unknown Dag id. Each view names the columns
those readers need, typed as the model types them (the types turn SQLite's text and
integers into datetimes and booleans); a test holds every view to its model, so the
two cannot drift apart.
"""

from __future__ import annotations

from sqlalchemy import Boolean, ColumnClause, DateTime, Integer, String, Text, column, table
from sqlalchemy.types import TypeEngine


def _columns(type_: type[TypeEngine] | TypeEngine, *names: str) -> list[ColumnClause]:
    return [column(name, type_) for name in names]


#: Every time is stored with its zone, as the models declare it.
_TIME = DateTime(timezone=True)

dag = table(
    "dag",
    *_columns(String, "dag_id", "fileloc", "schedule"),
    *_columns(Boolean, "is_paused", "is_active"),
    column("tags", Text),
)

dag_run = table(
    "dag_run",
    column("id", Integer),
    *_columns(String, "dag_id", "run_id", "run_type", "state"),
    *_columns(_TIME, "logical_date", "start_date", "end_date"),
)

task_instance = table(
    "task_instance",
    *_columns(Integer, "id", "dag_run_id", "try_number", "map_index"),
    *_columns(String, "task_id", "state"),
    *_columns(_TIME, "start_date", "end_date"),
    column("reason", Text),
)

job = table(
    "job",
    *_columns(Integer, "id", "pid"),
    *_columns(String, "job_type", "state", "hostname"),
    *_columns(_TIME, "start_date", "latest_heartbeat"),
)

import_error = table(
    "import_error",
    column("fileloc", String),
    column("error", Text),
    column("timestamp", _TIME),
)

dag_file = table(
    "dag_file",
    column("fileloc", String),
    column("last_parsed", _TIME),
)

serialized_dag = table("serialized_dag", column("dag_id", String), column("data", Text))
