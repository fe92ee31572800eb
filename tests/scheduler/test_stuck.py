"""Task instances stuck in queued (``[scheduler] task_queued_timeout``) with the local
executor, under each start method: a lost workload is queued again, then the task
fails once the retries are spent; a lost workload that turns up late never runs its
try a second time. The executors that lose workloads live in the scheduler's own
process (the test's): nothing fake crosses to a worker."""

from __future__ import annotations

from collections import Counter

import pytest

from spawnflow.executors.local import LocalExecutor
from spawnflow.processors.scheduler.stuck import queued_again
from tests.scheduler import harness
from tests.scheduler.test_runs import _scheduling, run_dag

pytestmark = pytest.mark.process

STUCK = {"scheduler.task_queued_timeout": "1", "scheduler.num_stuck_in_queued_retries": "2"}


class Losing(LocalExecutor):
    """Loses the first ``lose`` workloads of each task instance, as a broker that
    restarted without persistence loses its messages."""

    def __init__(self, settings, lose: int) -> None:
        super().__init__(settings)
        self.lose = lose
        self.lost: Counter[int] = Counter()

    def queue(self, workload) -> None:
        if self.lost[workload.ti_id] < self.lose:
            self.lost[workload.ti_id] += 1
            return
        super().queue(workload)


class Late(LocalExecutor):
    """Holds back each task instance's first workload and hands it to a worker right
    after the second, as a lost message that a broker delivers after all."""

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.held: dict[int, object] = {}
        self.late: list[int] = []

    def queue(self, workload) -> None:
        first = self.held.setdefault(workload.ti_id, workload)
        if first is workload:
            return
        super().queue(workload)
        if workload.ti_id not in self.late:
            self.late.append(workload.ti_id)
            super().queue(first)


def _runs_of(marks, name: str) -> int:
    path = marks / name
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def stuck_scheduling(start_method, make_settings, tmp_path):
    """The scheduler tests' settings, with a queued timeout of 1 s and 2 retries."""
    url = f"sqlite:///{tmp_path.as_posix()}/s.db"
    settings, marks = _scheduling(start_method, make_settings, tmp_path, url, **STUCK)
    marks.mkdir(exist_ok=True)
    return settings, marks


def test_a_lost_workload_is_queued_again_and_its_try_runs_once(stuck_scheduling):
    settings, marks = stuck_scheduling
    (marks / "open").touch()
    executor = Losing(settings, lose=1)

    run_id = run_dag(settings, "gated", executor=executor)

    tis = harness.task_instances(run_id)
    assert harness.run_state(run_id) == "success", {t: ti.reason for t, ti in tis.items()}
    assert {t: (ti.state, ti.try_number) for t, ti in tis.items()} == {
        t: ("success", 1) for t in ("before", "gate", "after")
    }
    assert executor.lost == Counter({ti.id: 1 for ti in tis.values()})
    assert [_runs_of(marks, t) for t in ("before", "gate", "after")] == [1, 1, 1]


def test_a_task_whose_workloads_are_all_lost_fails_saying_why(stuck_scheduling):
    settings, marks = stuck_scheduling
    executor = Losing(settings, lose=100)

    run_id = run_dag(settings, "gated", executor=executor)

    before = harness.task_instances(run_id)["before"]
    assert harness.run_state(run_id) == "failed"
    assert (before.state, before.try_number) == ("failed", 0)  # no try ever started
    assert "task_queued_timeout" in before.reason
    assert "num_stuck_in_queued_retries = 2" in before.reason
    assert executor.lost[before.id] == 3  # sent once, then queued again twice
    assert _runs_of(marks, "before") == 0


def test_a_lost_workload_that_turns_up_late_never_runs_its_try_twice(stuck_scheduling):
    settings, marks = stuck_scheduling
    (marks / "open").touch()
    executor = Late(settings)

    run_id = run_dag(settings, "gated", executor=executor)

    tis = harness.task_instances(run_id)
    assert harness.run_state(run_id) == "success", {t: ti.reason for t, ti in tis.items()}
    assert sorted(executor.late) == sorted(ti.id for ti in tis.values())  # both copies went
    assert {t: (ti.state, ti.try_number) for t, ti in tis.items()} == {
        t: ("success", 1) for t in ("before", "gate", "after")
    }
    assert [_runs_of(marks, t) for t in ("before", "gate", "after")] == [1, 1, 1]


@pytest.mark.parametrize(
    ("reason", "count"),
    [
        (None, 0),
        ("the task is no longer in the Dag", 0),
        ("queued for more than 1 s without a worker starting it; queued again (2 of 3)", 2),
    ],
)
def test_the_count_of_queued_again_is_read_from_the_reason(reason, count):
    assert queued_again(reason) == count
