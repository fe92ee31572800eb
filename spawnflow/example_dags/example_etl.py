"""Extract, transform, load: Python tasks that pass data to each other."""

import datetime as dt

from spawnflow import dag, task


@dag(
    schedule="@daily",
    start_date=dt.datetime(2026, 1, 1),
    tags=["example"],
    description="Extract orders, total them per customer, load the totals.",
)
def example_etl():
    @task(retries=2, retry_delay=dt.timedelta(seconds=5))
    def extract() -> list[dict]:
        return [
            {"customer": "ada", "amount": 12.5},
            {"customer": "grace", "amount": 7.0},
            {"customer": "ada", "amount": 3.25},
        ]

    @task
    def transform(orders: list[dict]) -> dict[str, float]:
        totals: dict[str, float] = {}
        for order in orders:
            totals[order["customer"]] = totals.get(order["customer"], 0.0) + order["amount"]
        return totals

    @task
    def load(totals: dict[str, float]) -> int:
        for customer, total in sorted(totals.items()):
            print(f"{customer}: {total:.2f}")
        return len(totals)

    load(transform(extract()))


example_etl()
