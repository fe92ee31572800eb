"""Import a Dag file and find the Dags it defines: for the file parser and the task runner."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from spawnflow.sdk import building
from spawnflow.sdk import dags as dag_registry
from spawnflow.sdk.names import DAG_FILE_MODULE_PREFIX
from spawnflow.sdk.tasks import DagDefinitionError


def prepare_path(path: str, dags_folder: str | None) -> None:
    """Let a Dag file import helpers from the Dags folder and from its own folder.

    Added at the end of ``sys.path``, as Airflow does, so that a helper never hides a
    standard module.
    """
    for folder in (dags_folder, str(Path(path).parent)):
        if folder and folder not in sys.path:
            sys.path.append(folder)


def import_dag_file(path: str) -> list[dag_registry.Dag]:
    """Import ``path`` and return its Dags, validated.

    A Dag belongs to the file that built it, or that holds it in a module-level name;
    a Dag an imported helper module built stays that module's. Raises whatever the
    file raises, or DagDefinitionError.
    """
    building.forget_built_dags()
    module_name = DAG_FILE_MODULE_PREFIX + hashlib.sha1(path.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise DagDefinitionError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    mine = [d for d in building.built_dags() if d.fileloc == path]
    mine += [d for d in dag_registry.iter_dags(vars(module)) if d not in mine]
    seen: set[str] = set()
    for dag in mine:
        if dag.dag_id in seen:
            raise DagDefinitionError(f"{path}: Dag {dag.dag_id!r} is defined twice in this file")
        seen.add(dag.dag_id)
        dag.fileloc = path  # the file to import again to run it
        dag.validate()
    return mine
