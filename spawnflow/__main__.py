"""``python -m spawnflow`` and the ``spawnflow`` console script.

The CLI is imported inside :func:`main`: a spawned child re-imports its parent's
``__main__`` module, and should not pay for click and the commands when it does.
"""

import sys


def main() -> None:
    """Run the spawnflow command line."""
    from spawnflow.commands import cli

    sys.exit(cli.main(prog_name="spawnflow"))


if __name__ == "__main__":
    main()
