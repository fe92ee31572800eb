"""spawnflow: a workflow orchestrator whose processes are correct under every start method.

This module stays light on purpose: every spawned child imports it.
"""

__version__ = "0.1.0"
