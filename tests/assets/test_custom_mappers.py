"""A Dag's own partition mapper: user code, which the Dag processor's file parser runs
for the events that wait for it; on SQLite, PostgreSQL and MariaDB, under each start
method."""

from __future__ import annotations

import pytest

from spawnflow.models.assets import PendingAssetEvent, PendingAssetMapping
from spawnflow.processors.dag_processor.manager import DagFileProcessorManager
from spawnflow.processors.scheduler.job import Scheduler
from spawnflow.services import assets as service
from tests.assets import count, parsed_project, partition_runs
from tests.scheduler import harness

pytestmark = pytest.mark.process

SALES, STOCK = "s3://sales/by-region", "s3://stock/by-region"
DAGS = """
from pathlib import Path
from spawnflow import Asset, CustomMapper, Dag, get_current_context, task

MARKS = Path({marks!r})
SALES, STOCK = Asset({sales!r}), Asset({stock!r})


class RegionDay(CustomMapper):
    def target(self, key):
        region, day = key.split("/")  # a key without a region raises ValueError
        return day


with Dag("daily_sales", schedule=SALES & STOCK,
         partition_mappers={{SALES: RegionDay(), STOCK: RegionDay()}}):
    @task
    def report():
        (MARKS / get_current_context()["partition_key"]).write_text("reported")

    report()
"""


@pytest.fixture
def project(start_method, make_settings, tmp_path, database_url):
    text = DAGS.format(marks="{marks}", sales=SALES, stock=STOCK)
    settings, marks, _ = parsed_project(
        make_settings, tmp_path, database_url, start_method, "sales.py", text
    )
    return settings, marks, tmp_path / "dags" / "sales.py"


def sales_runs() -> list[tuple[str | None, str]]:
    return partition_runs("daily_sales")


def test_events_are_mapped_by_the_dags_own_mapper_and_the_run_carries_its_day(project):
    settings, marks, _ = project
    service.record_event(SALES, "eu/2026-11-30", None)
    service.record_event(STOCK, "us/2026-11-30", None)
    service.record_event(SALES, "no region", None)
    # The writer ran no user code: the events wait for the Dag processor.
    assert (count(PendingAssetMapping), count(PendingAssetEvent)) == (3, 0)

    summary = DagFileProcessorManager(settings).run_pass()  # the file is due for them alone

    assert (summary.parsed, summary.mapped) == (1, 2)  # the key without a region: none
    assert (count(PendingAssetMapping), count(PendingAssetEvent)) == (0, 2)
    check = harness.deadline(180)
    Scheduler(settings).run(until=lambda: check() or sales_runs() == [("2026-11-30", "success")])
    assert (marks / "2026-11-30").read_text() == "reported"


def test_events_wait_while_the_dag_file_is_broken_and_are_mapped_once_it_is_fixed(project):
    settings, _, dag_file = project
    working = dag_file.read_text()
    service.record_event(SALES, "eu/2026-11-30", None)
    dag_file.write_text(working + "\nraise RuntimeError('half-edited')\n")

    broken = DagFileProcessorManager(settings).run_pass()
    assert (broken.parsed, broken.mapped, len(broken.errors)) == (1, 0, 1)
    # An unchanged broken file is not parsed again for its events at every pass.
    assert DagFileProcessorManager(settings).run_pass().parsed == 0
    assert count(PendingAssetMapping) == 1

    dag_file.write_text(working)
    fixed = DagFileProcessorManager(settings).run_pass()
    assert (fixed.parsed, fixed.mapped, fixed.errors) == (1, 1, {})
    assert (count(PendingAssetMapping), count(PendingAssetEvent)) == (0, 1)


def test_the_events_of_a_deleted_dag_stop_waiting(project):
    settings, _, dag_file = project
    service.record_event(SALES, "eu/2026-11-30", None)
    dag_file.unlink()

    summary = DagFileProcessorManager(settings).run_pass()

    assert summary.forgotten == [str(dag_file)]
    assert (count(PendingAssetMapping), count(PendingAssetEvent)) == (0, 0)
