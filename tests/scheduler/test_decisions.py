"""Trigger rules and how a Dag run ends, without a database."""

from __future__ import annotations

import pytest

from spawnflow.processors.scheduler.decisions import RUN, WAIT, decide, run_state

S, F, UF, SK, R, N = "success", "failed", "upstream_failed", "skipped", "running", "none"


@pytest.mark.parametrize(
    ("rule", "upstream", "expected"),
    [
        ("all_success", [], RUN),
        ("all_success", [S, S], RUN),
        ("all_success", [S, R], WAIT),
        ("all_success", [S, F], UF),
        ("all_success", [S, UF], UF),
        ("all_success", [S, SK], SK),
        ("all_done", [S, F, SK], RUN),
        ("all_done", [S, R], WAIT),
        ("all_failed", [F, UF], RUN),
        ("all_failed", [F, S], SK),
        ("all_failed", [F, R], WAIT),
        ("one_success", [R, S], RUN),
        ("one_success", [F, F], UF),
        ("one_success", [SK, SK], SK),
        ("one_success", [F, R], WAIT),
        ("one_failed", [R, F], RUN),
        ("one_failed", [S, S], SK),
        ("one_failed", [S, R], WAIT),
        ("none_failed", [S, SK], RUN),
        ("none_failed", [S, F], UF),
        ("none_failed", [S, N], WAIT),
        ("none_failed_min_one_success", [S, SK], RUN),
        ("none_failed_min_one_success", [SK, SK], SK),
        ("none_failed_min_one_success", [S, UF], UF),
        ("none_failed_min_one_success", [SK, N], WAIT),
        ("none_skipped", [S, F], RUN),
        ("none_skipped", [S, SK], SK),
        ("none_skipped", [S, N], WAIT),
        ("all_skipped", [SK, SK], RUN),
        ("all_skipped", [SK, S], SK),
        ("all_skipped", [SK, N], WAIT),
        ("always", [F, R], RUN),
    ],
)
def test_trigger_rules(rule, upstream, expected):
    assert decide(rule, upstream) == expected


def test_a_run_ends_failed_if_any_task_failed_and_waits_for_unfinished_ones():
    assert run_state([S, S, SK]) == "success"
    assert run_state([S, UF, S]) == "failed"
    assert run_state([S, F]) == "failed"
    assert run_state([S, R]) is None
    assert run_state([S, "up_for_retry"]) is None


def test_an_unknown_rule_is_an_error():
    with pytest.raises(ValueError, match="unknown trigger rule 'sometimes'"):
        decide("sometimes", [])
