"""Deciding about the waiting task instances of running runs, at a cost that does not
grow with a run's size.

Each pass reads, in one grouped statement for every running run, the run's task
instances counted by state and a *mark*: how many rows, the sum of their
``row_version`` and the highest id. Every UPDATE of a task instance raises its
``row_version`` and every new one gets a higher id, so a run whose mark is the one a
pass left it at, with nothing written since, has nothing new to decide: it is not read
again until its mark moves, a retry falls due or its Dag changes.

A run that changed is read only where decisions are made: its waiting task instances
(``none`` and ``up_for_retry``), and the states they wait on, as rows for small sets of
upstream tasks and as counts by state in SQL for large ones (the join after a wide
fan-out waits on every leaf). Whether the run ended comes from the counts. Only when
the Dag changed since a pass last reconciled the run is every row read, to add new
tasks and retire removed ones.

Rows the decisions change are read ``FOR UPDATE SKIP LOCKED`` (the runs) and written
with one guarded UPDATE per kind of change, so that two schedulers never decide about
the same run at once and a row somebody else changed meanwhile keeps what they wrote.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session

from spawnflow.comms.states import DagRunState, TaskState
from spawnflow.models.base import one_of
from spawnflow.models.run import DagRun, TaskInstance
from spawnflow.processors.scheduler import decisions
from spawnflow.processors.scheduler.expanding import expand_scheduled
from spawnflow.processors.scheduler.runs import DagBag, aware, pool_columns
from spawnflow.sdk import serialize

_REASONS: dict[str, str] = {
    TaskState.UPSTREAM_FAILED: "an upstream task failed",
    TaskState.SKIPPED: "its trigger rule was not met",
}
_WAITING = (TaskState.NONE, TaskState.UP_FOR_RETRY)
#: Ids per statement: below SQLite's oldest limit of 999 parameters per statement.
_CHUNK = 900
#: Upstream sets larger than this are counted by state in SQL instead of read as rows.
_COUNT_ABOVE = 64

#: (rows, sum of row versions, highest id) of one run's task instances.
Mark = tuple[int, int, int]


@dataclass(frozen=True)
class _Seen:
    mark: Mark
    #: The earliest time one of the run's up_for_retry task instances falls due.
    retry_due: dt.datetime | None


class RunsSeen:
    """What the scheduler's last passes left each running run at; a run that is where
    a pass left it, with nothing written, is skipped. One per scheduler, kept across
    passes; a scheduler that starts looks at every run once."""

    def __init__(self) -> None:
        self._runs: dict[int, _Seen] = {}
        #: The Dag each run's task instances were last reconciled with.
        self._reconciled: dict[int, serialize.SerializedDag] = {}

    def unchanged(
        self, run_id: int, mark: Mark, doc: serialize.SerializedDag, now: dt.datetime
    ) -> bool:
        seen = self._runs.get(run_id)
        return (
            seen is not None
            and seen.mark == mark
            and self.reconciled(run_id, doc)
            and (seen.retry_due is None or now < seen.retry_due)
        )

    def reconciled(self, run_id: int, doc: serialize.SerializedDag) -> bool:
        return self._reconciled.get(run_id) is doc

    def remember(self, run_id: int, seen: _Seen | None, reconciled: serialize.SerializedDag):
        self._reconciled[run_id] = reconciled
        if seen is None:
            self._runs.pop(run_id, None)
        else:
            self._runs[run_id] = seen

    def keep_only(self, run_ids: Collection[int]) -> None:
        """Forget runs that are no longer running."""
        for memo in (self._runs, self._reconciled):
            for run_id in [r for r in memo if r not in run_ids]:
                del memo[run_id]


def schedule_tasks(
    session: Session, bag: DagBag, now: dt.datetime, only: set[int] | None,
    seen: RunsSeen | None = None, ended_runs: list[DagRun] | None = None,
) -> int:  # fmt: skip
    """Decide about the waiting task instances of running runs; how many changed.

    ``seen`` carries what earlier passes saw (without it every run is looked at); the
    runs this pass ended are appended to ``ended_runs`` (they end when the session
    commits).
    """
    seen = seen if seen is not None else RunsSeen()
    query = select(DagRun).where(DagRun.state == DagRunState.RUNNING)
    if only is not None:
        query = query.where(DagRun.id.in_(only))
    running = session.scalars(query.order_by(DagRun.id).with_for_update(skip_locked=True)).all()
    if only is None:
        seen.keep_only({run.id for run in running})
    counts, marks = _counts_and_marks(session, [run.id for run in running])
    bag.prefetch(session, {run.dag_id for run in running})
    changed = 0
    for run in running:
        doc = bag.get(session, run.dag_id)
        mark = marks.get(run.id, (0, 0, 0))
        if doc is None or seen.unchanged(run.id, mark, doc, now):
            continue
        full = not seen.reconciled(run.id, doc)
        tis = _RunTasks(session, run, doc, counts.get(run.id, Counter()), full)
        if full:
            tis.follow_dag_changes(now)
        retry_due = tis.decide(now)
        written, whole = tis.write()
        if written:  # a mapped task just scheduled gets its elements, in this transaction
            expanded = expand_scheduled(session, run, doc, now)
            changed += expanded
            whole = whole and not expanded  # the counts do not have the new rows
        changed += written
        ended = decisions.run_state_of_counts(tis.counts) if whole else None
        if ended is not None:  # and only from states that were all written
            run.state, run.end_date = ended, now
            changed += 1
            if ended_runs is not None:
                ended_runs.append(run)
        # A pass that wrote moved the mark itself: the next one looks again, once.
        memo = _Seen(mark, retry_due) if written == 0 and ended is None else None
        seen.remember(run.id, memo, doc)
    return changed


def _counts_and_marks(
    session: Session, run_ids: list[int]
) -> tuple[dict[int, Counter[str]], dict[int, Mark]]:
    """Each run's task instances counted by state, and each run's mark."""
    counts: dict[int, Counter[str]] = {}
    marks: dict[int, Mark] = {}
    for start in range(0, len(run_ids), _CHUNK):
        chunk = run_ids[start : start + _CHUNK]
        for run_id, state, rows, versions, highest in session.execute(
            select(TaskInstance.dag_run_id, TaskInstance.state, func.count(),
                   func.sum(TaskInstance.row_version), func.max(TaskInstance.id))
            .where(one_of(session, TaskInstance.dag_run_id, chunk))
            .group_by(TaskInstance.dag_run_id, TaskInstance.state)
        ):  # fmt: skip
            counts.setdefault(run_id, Counter())[state] = rows
            total, summed, top = marks.get(run_id, (0, 0, 0))
            # int(): MySQL's SUM() is a DECIMAL.
            marks[run_id] = (total + rows, summed + int(versions or 0), max(top, highest))
    return counts, marks


class _RunTasks:
    """The task instances of one run a pass decides about, as ids and states, the
    run's counts by state, and the changes decided, written together by :meth:`write`."""

    def __init__(self, session: Session, run: DagRun, doc: serialize.SerializedDag,
                 counts: Counter[str], every_row: bool) -> None:  # fmt: skip
        self.session, self.run, self.doc = session, run, doc
        self.counts = counts
        query = select(
            TaskInstance.id, TaskInstance.task_id, TaskInstance.state, TaskInstance.next_try_at
        ).where(TaskInstance.dag_run_id == run.id)
        if not every_row:
            query = query.where(TaskInstance.state.in_(_WAITING))
        rows = session.execute(query).all()
        #: task id -> {row id: state}: the rows read, and the upstream rows read for them.
        #: A mapped task has several, one per instance: a downstream task's trigger rule
        #: counts each one, as Airflow's does, and each instance waits on its own.
        self._states: dict[str, dict[int, str]] = {}
        for r in rows:
            self._states.setdefault(r.task_id, {})[r.id] = r.state
        #: The tasks whose every row was read.
        self._complete: set[str] = set(self._states) if every_row else set()
        self._retry_at = {r.id: r.next_try_at for r in rows}
        #: (task id, row id) of each waiting row.
        self._waiting = [(r.task_id, r.id) for r in rows if r.state in _WAITING]
        #: row id -> (task id, state it had, state decided), for large upstream sets' counts.
        self._moved: dict[int, tuple[str, str, str]] = {}
        #: (state it had, what to set) -> ids; the state it had guards the UPDATE, so a
        #: task instance somebody else changed meanwhile keeps what they wrote.
        self._moves: dict[tuple[str, tuple[tuple[str, Any], ...]], list[int]] = {}
        self._added = 0

    def follow_dag_changes(self, now: dt.datetime) -> None:
        """The Dag changed since the run started: add new tasks, retire removed ones
        (every row was read)."""
        new = [task for task in self.doc.tasks if task.task_id not in self._states]
        added = [
            TaskInstance(dag_run_id=self.run.id, dag_id=self.run.dag_id, task_id=task.task_id,
                         state=TaskState.NONE, try_number=0, max_tries=task.retries,
                         **pool_columns(self.doc, task))
            for task in new
        ]  # fmt: skip
        if added:
            self.session.add_all(added)
            self.session.flush()  # for their ids: they are decided about in this pass
            for ti in added:
                self._states[ti.task_id] = {ti.id: TaskState.NONE}
                self._complete.add(ti.task_id)
                self._waiting.append((ti.task_id, ti.id))
            self.counts[TaskState.NONE] += len(added)
            self._added += len(added)
        known = self.doc.task_index
        for task_id, states in list(self._states.items()):
            for ti_id, state in list(states.items()):
                if task_id not in known and state in (*_WAITING, TaskState.SCHEDULED):
                    self._move(task_id, ti_id, state=TaskState.REMOVED, end_date=now,
                               reason="the task is no longer in the Dag")  # fmt: skip

    def decide(self, now: dt.datetime) -> dt.datetime | None:
        """Decide about every waiting task instance, in the Dag's order (so that one
        decided here is seen by its downstream tasks); the earliest retry not due yet."""
        index = self.doc.task_index
        waiting = sorted((w for w in self._waiting if w[0] in index), key=lambda w: index[w[0]])
        self._read_upstream_rows([self.doc.tasks[index[task_id]] for task_id, _ in waiting])
        large: dict[frozenset[str], Counter[str]] = {}
        #: (rule, upstream states) -> decision: the leaves of a fan-out share theirs.
        decided: dict[tuple[str, tuple[str, ...]], str] = {}
        retry_due: dt.datetime | None = None
        for task_id, ti_id in waiting:
            task = self.doc.tasks[index[task_id]]
            state = self._states[task_id][ti_id]
            if state == TaskState.UP_FOR_RETRY:
                due = self._retry_at.get(ti_id)
                if due is None or aware(due) <= now:
                    self._move(task_id, ti_id, state=TaskState.SCHEDULED, next_try_at=None)
                elif retry_due is None or aware(due) < retry_due:
                    retry_due = aware(due)
                continue
            if state != TaskState.NONE:
                continue  # retired above
            if len(task.upstream) > _COUNT_ABOVE:
                if self._surely_waits(task):
                    continue
                key = frozenset(task.upstream)
                if key not in large:
                    large[key] = self._count_upstream(key)
                upstream = self._with_moves(large[key], key)
                decision = decisions.decide_counts(task.trigger_rule, upstream)
            else:
                read = self._states
                states = tuple(
                    state for u in task.upstream if u in read for state in read[u].values()
                )
                decision = decided.get((task.trigger_rule, states), "")
                if not decision:
                    decision = decisions.decide(task.trigger_rule, states)
                    decided[task.trigger_rule, states] = decision
            if decision == decisions.RUN:
                self._move(task_id, ti_id, state=TaskState.SCHEDULED)
            elif decision != decisions.WAIT:
                self._move(task_id, ti_id, state=decision, start_date=now, end_date=now,
                           reason=_REASONS[decision])  # fmt: skip
        return retry_due

    def _surely_waits(self, task: serialize.SerializedTask) -> bool:
        """Whether ``task``, with a large upstream set, must wait, seen from the run's
        counts alone: more of the run's task instances are unfinished than the tasks
        outside that set could account for, and none failed or was skipped, so no rule
        decides before all are done. The join of a wide fan-out then costs no count in
        SQL on each of the passes while its upstream tasks run; only the last ones count."""
        rule = task.trigger_rule
        if rule not in ("all_success", "all_done", "none_failed", "none_failed_min_one_success"):
            return False  # rules that can decide before every upstream task is done
        counts = self.counts
        if sum(counts.values()) != len(self.doc.tasks):
            return False  # rows of tasks no longer in the Dag (which may be unfinished)
        unfinished = sum(n for state, n in counts.items() if state not in TaskState.FINISHED)
        outside = len(self.doc.tasks) - len(task.upstream)  # this task among them
        if unfinished <= outside:
            return False
        failed = sum(counts[state] for state in decisions.FAILED_STATES)
        skipped = counts[TaskState.SKIPPED]
        return rule == "all_done" or (
            not failed and (rule.startswith("none_failed") or not skipped)
        )

    def _read_upstream_rows(self, tasks: list[serialize.SerializedTask]) -> None:
        """Read the states of the small upstream sets' tasks that were not read yet."""
        wanted = sorted({
            upstream for task in tasks if len(task.upstream) <= _COUNT_ABOVE
            for upstream in task.upstream if upstream not in self._complete
        })  # fmt: skip
        for start in range(0, len(wanted), _CHUNK):
            found = self.session.execute(
                select(TaskInstance.id, TaskInstance.task_id, TaskInstance.state).where(
                    TaskInstance.dag_run_id == self.run.id,
                    one_of(self.session, TaskInstance.task_id, wanted[start : start + _CHUNK]),
                )
            ).all()
            for ti_id, task_id, state in found:
                # A row read already (a waiting one) keeps what this pass knows of it.
                self._states.setdefault(task_id, {}).setdefault(ti_id, state)
            self._complete.update(wanted[start : start + _CHUNK])

    def _count_upstream(self, upstream: frozenset[str]) -> Counter[str]:
        """A large set of upstream tasks' states counted in SQL, as they were read."""
        names = sorted(upstream)
        counted: Counter[str] = Counter()
        for start in range(0, len(names), _CHUNK):
            for state, count in self.session.execute(
                select(TaskInstance.state, func.count())
                .where(TaskInstance.dag_run_id == self.run.id,
                       one_of(self.session, TaskInstance.task_id, names[start : start + _CHUNK]))
                .group_by(TaskInstance.state)
            ):  # fmt: skip
                counted[state] += count
        return counted

    def _with_moves(self, counted: Counter[str], upstream: frozenset[str]) -> Counter[str]:
        """Counts read before this pass's decisions, with those decisions applied."""
        states = Counter(counted)
        for task_id, was, now_is in self._moved.values():
            if task_id in upstream:
                states[was] -= 1
                states[now_is] += 1
        return states

    def _move(self, task_id: str, ti_id: int, **values: Any) -> None:
        """Decide ``values`` for row ``ti_id`` of ``task_id``; later decisions of this pass
        see its state."""
        was = self._states[task_id][ti_id]
        self._moves.setdefault((was, tuple(sorted(values.items()))), []).append(ti_id)
        self._states[task_id][ti_id] = values["state"]
        first = self._moved.get(ti_id, (task_id, was, was))[1]
        self._moved[ti_id] = (task_id, first, values["state"])
        self.counts[was] -= 1
        self.counts[values["state"]] += 1

    def write(self) -> tuple[int, bool]:
        """Write what was decided, once, one statement per kind of change (in chunks);
        how many task instances were added or changed, and whether every change was
        written. One is not when somebody changed its row after this pass read it
        (another scheduler queued a task this pass retires)."""
        written, whole = self._added, True
        for (was, values), ids in self._moves.items():
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start : start + _CHUNK]
                done = self.session.execute(
                    update(TaskInstance)
                    .where(one_of(self.session, TaskInstance.id, chunk),
                           TaskInstance.state == was)
                    .values(dict(values))
                    .execution_options(synchronize_session=False)
                )  # fmt: skip
                assert isinstance(done, CursorResult)  # an UPDATE's result counts its rows
                written += done.rowcount
                whole = whole and done.rowcount == len(chunk)
        return written, whole
