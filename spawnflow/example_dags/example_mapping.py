"""Dynamic task mapping: one task instance per file found at run time, then one result."""

import datetime as dt

from spawnflow import Dag, task

with Dag(
    "example_mapping",
    schedule="@daily",
    start_date=dt.datetime(2026, 1, 1),
    tags=["example"],
    description="List the day's files, count each one's rows in parallel, add the counts.",
):

    @task
    def list_files() -> list[str]:
        # Known only when the run runs: a bucket listing, say.
        return ["orders.csv", "customers.csv", "products.csv"]

    @task(max_active_tis_per_dag=2)  # at most two files counted at once
    def count_rows(path: str, header_lines: int) -> int:
        return len(path) - header_lines

    @task
    def total(counts: list[int]) -> int:  # every element's result, in map-index order
        return sum(counts)

    @task.command
    def announce(table: str, rows: int) -> str:
        return f"echo {table} {rows}"

    counts = count_rows.partial(header_lines=1).expand(path=list_files())
    total(counts)
    # Over literal values, with several arguments per instance.
    announce.expand_kwargs([{"table": "orders", "rows": 3}, {"table": "customers", "rows": 2}])
