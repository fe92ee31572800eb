"""Example Dags that ship with spawnflow; loaded when ``[core] load_examples`` is true."""
