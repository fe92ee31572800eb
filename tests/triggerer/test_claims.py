"""Two triggerers at once on PostgreSQL and MariaDB, under each start method: every
trigger is run by one of them, never by both, and each task resumes once."""

from __future__ import annotations

from collections import Counter

import pytest

from spawnflow.comms.states import TaskState
from tests.scheduler import harness
from tests.triggerer.harness import (
    log_events,
    marks_of,
    start_triggerer,
    task_instance,
    trigger_rows,
)
from tests.triggerer.test_deferral import schedule_until, set_up

pytestmark = pytest.mark.process
RUNS = 8


def test_two_triggerers_claim_disjoint_triggers_and_each_task_resumes_once(
    start_method, make_settings, tmp_path, claims_url
):
    # Room for little more than half the tasks' triggers each (and the asset watcher's):
    # neither can take them all, so both must claim some.
    capacity = RUNS // 2 + 1
    settings, gates, marks = set_up(start_method, make_settings, tmp_path, claims_url,
                                    **{"triggerer.capacity": str(capacity),
                                       "executor.parallelism": "2"})  # fmt: skip
    run_ids = {harness.trigger("waits_for_a_gate") for _ in range(RUNS)}
    triggerers = [start_triggerer(settings), start_triggerer(settings)]

    def every_trigger_is_claimed() -> bool:
        deferred = [task_instance(r, "waits").state == TaskState.DEFERRED for r in run_ids]
        rows = trigger_rows()
        return all(deferred) and len(rows) == RUNS and all(t.triggerer_id for t in rows)

    try:
        schedule_until(settings, run_ids, every_trigger_is_claimed)
        holders = Counter(row.triggerer_id for row in trigger_rows())
        (gates / "open").write_text("")
        try:
            schedule_until(settings, run_ids, lambda: all(harness.finished(r) for r in run_ids))
        except AssertionError as stuck:  # say where each task and trigger was
            raise AssertionError(f"{stuck}: {_where_things_are(run_ids, settings)}") from None
    finally:
        for triggerer in triggerers:
            triggerer.stop(grace=5)

    assert len(holders) == 2
    assert sum(holders.values()) == RUNS
    assert max(holders.values()) <= capacity
    runner_log = settings.logging.base_log_folder / "trigger-runner.log"
    started = [
        (e["trigger_id"], e["pid"])
        for e in log_events(runner_log)
        if e.get("event") == "trigger started" and e["owner"].startswith("task")
    ]
    assert len(started) == RUNS  # each trigger started once, by one runner
    assert len({trigger for trigger, _ in started}) == RUNS
    assert len({pid for _, pid in started}) == 2
    for run_id in run_ids:
        waits = task_instance(run_id, "waits")
        assert (waits.state, waits.try_number) == ("success", 1), waits.reason
    assert len(marks_of(marks, "waits-resumed")) == RUNS


def _where_things_are(run_ids: set[int], settings) -> str:
    """The tasks' states and reasons, the trigger rows' holders, and the end of the
    trigger runners' log: what a test that timed out shows."""
    tasks = [(ti.state, ti.try_number, ti.reason)
             for ti in (task_instance(r, "waits") for r in sorted(run_ids))]  # fmt: skip
    triggers = [(row.id, row.triggerer_id) for row in trigger_rows()]
    runner_log = settings.logging.base_log_folder / "trigger-runner.log"
    events = [(e.get("event"), e.get("trigger_id"), e.get("pid")) for e in log_events(runner_log)]
    return f"tasks {tasks}; triggers {triggers}; last runner events {events[-12:]}"
