"""Fan out to parallel branches, fan back in; a clean-up that always runs."""

import datetime as dt

from spawnflow import Dag, TriggerRule, task

with Dag(
    "example_fan_out_in",
    schedule=dt.timedelta(hours=6),
    start_date=dt.datetime(2026, 1, 1),
    tags=["example"],
    description="Split work into shards, process them in parallel, combine the results.",
    max_active_tasks=4,
):

    @task
    def plan() -> list[int]:
        return [1, 2, 3, 4]

    @task
    def combine(*parts: int) -> int:
        return sum(parts)

    @task(trigger_rule=TriggerRule.ALL_DONE)
    def clean_up() -> str:
        return "cleaned"

    shards = plan()
    parts = []
    for shard in range(4):

        @task(task_id=f"process_shard_{shard}")
        def process(numbers: list[int], shard: int = shard) -> int:
            return numbers[shard] ** 2

        parts.append(process(shards))
    total = combine(*parts)
    total >> clean_up()
