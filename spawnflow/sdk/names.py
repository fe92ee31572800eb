"""The names spawnflow accepts for ids and keys, and the one it gives Dag file modules.

Below every other SDK module: tasks, Dags, triggers, assets and state stores all check
names here.
"""

from __future__ import annotations

import re

ID_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,249}$")

#: The name of a Dag file's module starts with this (the rest is a hash of its path).
DAG_FILE_MODULE_PREFIX = "spawnflow_dagfile_"


def check_id(value: object, what: str) -> str:
    """``value`` if it is a valid id (1-250 letters, digits, ``_``, ``-``, ``.``);
    ValueError naming ``what`` otherwise."""
    if not isinstance(value, str) or not ID_PATTERN.match(value):
        raise ValueError(
            f"{what} {value!r} must be 1-250 letters, digits, '_', '-' or '.', "
            "not starting with '-' or '.'"
        )
    return value


def defined_in_dag_file(classpath: str) -> bool:
    """Whether the class at ``classpath`` lives in a Dag file's module (or ``__main__``),
    which no other process can import by that name."""
    module = classpath.rpartition(".")[0]
    return module.startswith(DAG_FILE_MODULE_PREFIX) or module in ("", "__main__")
