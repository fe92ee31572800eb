"""What a task instance may do next, given its upstream tasks' states (trigger rules).

Pure functions, so that every rule is tested without a database.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from spawnflow.comms.states import DagRunState, TaskState

RUN, WAIT = "run", "wait"
FAILED_STATES = (TaskState.FAILED, TaskState.UPSTREAM_FAILED)


def decide(rule: str, upstream: Iterable[str]) -> str:
    """``run``, ``wait``, or the state to set: ``upstream_failed`` or ``skipped``."""
    return decide_counts(rule, Counter(upstream))


def decide_counts(rule: str, states: Counter[str]) -> str:
    """:func:`decide` from the number of upstream tasks in each state."""
    total = sum(states.values())
    finished = sum(states[s] for s in TaskState.FINISHED)
    succeeded = states[TaskState.SUCCESS]
    failed = sum(states[s] for s in FAILED_STATES)
    skipped = states[TaskState.SKIPPED]
    done = finished == total
    if rule == "always":
        return RUN
    if rule == "all_success":
        if failed:
            return TaskState.UPSTREAM_FAILED
        if skipped:
            return TaskState.SKIPPED
        return RUN if done else WAIT
    if rule == "all_done":
        return RUN if done else WAIT
    if rule == "all_failed":
        if succeeded or skipped:
            return TaskState.SKIPPED
        return RUN if done else WAIT
    if rule == "one_success":
        if succeeded:
            return RUN
        return (
            TaskState.UPSTREAM_FAILED if done and failed else (TaskState.SKIPPED if done else WAIT)
        )
    if rule == "one_failed":
        if failed:
            return RUN
        return TaskState.SKIPPED if done else WAIT
    if rule == "none_failed":
        if failed:
            return TaskState.UPSTREAM_FAILED
        return RUN if done else WAIT
    if rule == "none_failed_min_one_success":  # the join after a branch
        if failed:
            return TaskState.UPSTREAM_FAILED
        if not done:
            return WAIT
        return RUN if succeeded else TaskState.SKIPPED
    if rule == "none_skipped":
        if skipped:
            return TaskState.SKIPPED
        return RUN if done else WAIT
    if rule == "all_skipped":
        if skipped < finished:  # one ended otherwise
            return TaskState.SKIPPED
        return RUN if done else WAIT
    raise ValueError(f"unknown trigger rule {rule!r}")


def run_state(task_states: Iterable[str]) -> str | None:
    """The state a running Dag run ends in, or None while tasks are unfinished.

    Failed when any task failed or could not run because of a failure; otherwise
    success once every task finished (skipped ones included).
    """
    return run_state_of_counts(Counter(task_states))


def run_state_of_counts(counts: Mapping[str, int]) -> str | None:
    """:func:`run_state` from the number of task instances in each state (states
    counted zero or below are absent)."""
    present = [state for state, count in counts.items() if count > 0]
    if any(s not in TaskState.FINISHED for s in present):
        return None
    return DagRunState.FAILED if any(s in FAILED_STATES for s in present) else DagRunState.SUCCESS
