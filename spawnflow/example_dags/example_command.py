"""Shell commands as tasks: a fixed command, and one built from an upstream value.

The commands run in the OS's shell (sh on Linux and macOS, cmd on Windows), so they use
only what both understand: ``echo``, and Python itself (the interpreter that parses this
file, quoted, with code that holds no quote, ``$`` or ``%``).
"""

import datetime as dt
import sys

from spawnflow import CommandTask, Dag, task

PYTHON = f'"{sys.executable}"'

with Dag(
    "example_command",
    schedule="0 6 * * 1-5",
    start_date=dt.datetime(2026, 1, 1),
    tags=["example"],
    description="Print the time, count the entries of the temporary folder, report the count.",
    default_args={"retries": 1, "execution_timeout": dt.timedelta(minutes=5)},
):
    when = CommandTask(
        "print_date",
        f'{PYTHON} -c "import datetime; print(datetime.datetime.now(datetime.UTC).isoformat())"',
    )
    count = CommandTask(
        "count_tmp_files",
        f'{PYTHON} -c "import os, tempfile; print(len(os.listdir(tempfile.gettempdir())))"',
    )

    @task.command
    def report(number_of_files: str) -> str:
        return f"echo there are {number_of_files.strip()} entries in the temporary folder"

    when >> count
    report(count.output)
