"""Choose a path at run time with a branch, and gather related tasks in task groups."""

import datetime as dt

from spawnflow import Dag, TaskGroup, TriggerRule, task

with Dag(
    "example_branching",
    schedule="@daily",
    start_date=dt.datetime(2026, 1, 1),
    tags=["example"],
    description="A full load on Mondays, an incremental one on other days, then a report.",
):

    @task.branch
    def choose_load(context) -> str:
        # The id of the task or task group to follow; the other one is skipped.
        return "full_load" if context["logical_date"].weekday() == 0 else "incremental"

    @task
    def extract(table: str) -> int:
        return len(table)

    @task
    def merge(*counts: int) -> int:
        return sum(counts)

    with TaskGroup("full_load") as full_load:  # tasks full_load.extract, ...
        merge(*(extract(table) for table in ("orders", "customers", "products")))

    with TaskGroup("incremental") as incremental:  # incremental.extract, incremental.merge
        merge(extract("orders"))

    # Runs after whichever group ran (the other one is skipped, so all_success would not).
    @task(trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
    def report() -> str:
        return "reported"

    choose_load() >> [full_load, incremental] >> report()
