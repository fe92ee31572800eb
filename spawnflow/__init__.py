"""spawnflow: a workflow orchestrator whose processes are correct under every start method.

``from spawnflow import Dag, dag, task, CommandTask`` is the authoring API (see
:mod:`spawnflow.sdk`). It is loaded on first use: every spawned child imports this
package, and most children never build a Dag.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    import spawnflow.sdk

    if name in spawnflow.sdk.__all__:
        return getattr(spawnflow.sdk, name)
    raise AttributeError(f"module 'spawnflow' has no attribute {name!r}")
