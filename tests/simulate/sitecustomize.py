"""Turns on the OS simulation in every Python process of a test run (see simulated_os.py).

Python imports ``sitecustomize`` at start-up from the first folder on ``sys.path``
that has one; with this folder on ``PYTHONPATH`` that includes spawned children,
the forkserver and every ``python -m spawnflow`` a test starts, which is what makes
the simulation reach them. Without ``SPAWNFLOW_TEST_SIMULATE_OS`` it does nothing.
"""

import os

if os.environ.get("SPAWNFLOW_TEST_SIMULATE_OS"):
    import simulated_os

    simulated_os.activate(os.environ["SPAWNFLOW_TEST_SIMULATE_OS"])
