"""Shell commands as tasks: a fixed command, and one built from an upstream value."""

import datetime as dt

from spawnflow import CommandTask, Dag, task

with Dag(
    "example_command",
    schedule="0 6 * * 1-5",
    start_date=dt.datetime(2026, 1, 1),
    tags=["example"],
    description="Print the date, count the files in /tmp, then report the count.",
    default_args={"retries": 1, "execution_timeout": dt.timedelta(minutes=5)},
):
    when = CommandTask("print_date", "date -u +%Y-%m-%dT%H:%M:%SZ")
    count = CommandTask("count_tmp_files", "ls -1 /tmp | wc -l")

    @task.command
    def report(number_of_files: str) -> str:
        return f"echo 'there are {number_of_files.strip()} entries in /tmp'"

    when >> count
    report(count.output)
