"""The triggerer's bookkeeping of its runner's ends, in the test process: a runner let
go while idle is no failure, and does not bring the triggerer closer to giving up."""

from __future__ import annotations

import pytest

from spawnflow.bootstrap.child import ChildBootError, ExitStatus
from spawnflow.processors.triggerer.job import MAX_BOOT_FAILURES, Triggerer


@pytest.fixture
def triggerer(make_settings) -> Triggerer:
    return Triggerer(make_settings())


def test_a_runner_that_left_idle_clears_the_failures_before_it(triggerer):
    # Runners that could not boot, then one that booted, ran and was let go while idle.
    triggerer._failures, triggerer._retiring = MAX_BOOT_FAILURES - 1, True
    triggerer._on_exit(None, ExitStatus(0))  # type: ignore[arg-type]
    assert (triggerer._failures, triggerer._retiring) == (0, False)
    # The next runner that cannot boot is the first failure in a row, not the last.
    triggerer._on_boot_failure(None, ChildBootError("the runner could not boot"))  # type: ignore[arg-type]
    assert triggerer._failures == 1


def test_a_runner_let_go_before_it_booted_is_no_failure_and_the_next_gets_triggers(triggerer):
    triggerer._failures, triggerer._retiring = MAX_BOOT_FAILURES - 1, True
    triggerer._on_boot_failure(None, ChildBootError("killed while booting"))  # type: ignore[arg-type]
    assert (triggerer._failures, triggerer._retiring, triggerer.runner) == (
        MAX_BOOT_FAILURES - 1, False, None
    )  # fmt: skip
