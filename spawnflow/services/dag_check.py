"""``spawnflow dags check``: does a Dag file work the same under every start method?

The file is parsed in a file-parser child under each method, as the Dag processor
would, and the Dags are compared field by field. Then each task of each Dag runs once
under each method, as ``tasks test`` runs it (a task process, nothing written), in the
Dag's order, its upstream XComs being what the check's earlier tasks pushed; the task's
own ``multiprocessing`` default start method is the method under test, so a task that
works only under fork (a lambda handed to a ``Process``, state a child expects to
inherit) fails under spawn here rather than on a user's Mac.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.states import TaskState
from spawnflow.sdk import serialize
from spawnflow.sdk.serialize import SerializedDag


@dataclass
class MethodParse:
    """What parsing one file found under one start method."""

    method: str
    ok: bool
    dags: dict[str, str]  # dag id -> hash of its serialized form
    tasks: int
    error: str | None
    seconds: float
    documents: dict[str, SerializedDag] = field(default_factory=dict, compare=False)


@dataclass
class TaskRun:
    """How one task's run under one start method ended."""

    dag_id: str
    task_id: str
    method: str
    state: str
    reason: str | None


@dataclass
class Difference:
    """Where the start methods disagree, and what most often makes them."""

    what: str
    likely_cause: str | None = None

    def __str__(self) -> str:
        return self.what + (f" (likely cause: {self.likely_cause})" if self.likely_cause else "")


def check_file(
    path: str, methods: list[str], timeout: float, dags_folder: str | None = None
) -> list[MethodParse]:
    """Parse ``path`` in a file-parser child under each of ``methods``, as the processor would."""
    from spawnflow.bootstrap import launcher
    from spawnflow.processors.dag_processor.messages import ParseResult
    from spawnflow.processors.dag_processor.parsing import PARSER_TARGET

    results = []
    for method in methods:
        started = time.monotonic()
        spec = launcher.ChildSpec(
            "file-parser", PARSER_TARGET, {"path": path, "dags_folder": dags_folder}
        )
        child = launcher.launch(spec, method=method)
        message, error = None, None
        try:
            child.wait_ready()  # the boot has a budget of its own ([core] child_boot_timeout)
            message = child.channel.recv(timeout=timeout)
        except TimeoutError:
            error = f"timed out after {timeout:g} seconds"
        except (EOFError, launcher.ChildBootError):
            pass
        status = child.stop(grace=5) if child.is_alive() else child.join(timeout=30)
        assert status is not None  # stop() always reaps; join() reaps an exited child at once
        documents: dict[str, SerializedDag] = {}
        if isinstance(message, ParseResult):
            error = message.error
            documents = {d.dag_id: d for d in message.dags}
        else:
            error = error or f"the parser {status.describe(meaning=False)} before it reported"
        results.append(MethodParse(
            method, error is None, {i: serialize.dag_hash(d) for i, d in documents.items()},
            sum(len(d.tasks) for d in documents.values()), error,
            time.monotonic() - started, documents,
        ))  # fmt: skip
    return results


def differences(results: list[MethodParse]) -> list[Difference]:
    """Where the parsed Dags disagree between methods (empty when they all agree)."""
    found = []
    ids = {method.method: set(method.dags) for method in results}
    everyone = set().union(*ids.values()) if ids else set()
    for dag_id in sorted(everyone):
        missing = [m for m, present in ids.items() if dag_id not in present]
        if missing:
            found.append(Difference(f"Dag {dag_id!r} is missing under {', '.join(missing)}"))
            continue
        if len({m.dags[dag_id] for m in results}) > 1:
            what = _what_differs([(m.method, m.documents[dag_id]) for m in results])
            found.append(Difference(
                f"Dag {dag_id!r} differs between start methods: {what}",
                "the file depends on what was imported before it, on module state its parent "
                "process set, or on the order of a set or a dict",
            ))  # fmt: skip
    outcomes = {m.method: m.ok for m in results}
    if len(set(outcomes.values())) > 1:
        failing = [m for m, ok in outcomes.items() if not ok]
        found.append(Difference(
            f"the file loads under some start methods but not under {', '.join(failing)}"
        ))  # fmt: skip
    return found


def _what_differs(documents: list[tuple[str, SerializedDag]]) -> str:
    """Which tasks, dependencies and settings differ, each with its value per method."""
    parts = []
    tasks = {method: doc.task_ids for method, doc in documents}
    if len({tuple(sorted(t)) for t in tasks.values()}) > 1:
        parts.append("tasks " + _per_method({m: ", ".join(sorted(t)) for m, t in tasks.items()}))
    edges = {
        method: sorted(f"{up} >> {task.task_id}" for task in doc.tasks for up in task.upstream)
        for method, doc in documents
    }  # fmt: skip
    if len({tuple(e) for e in edges.values()}) > 1:
        parts.append("dependencies " + _per_method({m: ", ".join(e) for m, e in edges.items()}))
    plain = {method: msgspec.to_builtins(doc) for method, doc in documents}
    for key in next(iter(plain.values())):
        if key in ("tasks", "dag_id") or len({repr(p.get(key)) for p in plain.values()}) == 1:
            continue
        parts.append(f"{key} " + _per_method({m: repr(p.get(key)) for m, p in plain.items()}))
    if not parts:  # the tasks' own settings (retries, arguments, ...)
        task_fields = {
            method: {t.task_id: msgspec.to_builtins(t) for t in doc.tasks}
            for method, doc in documents
        }  # fmt: skip
        first = next(iter(task_fields.values()))
        for task_id in first:
            for key in first[task_id]:
                values = {m: repr(f.get(task_id, {}).get(key)) for m, f in task_fields.items()}
                if len(set(values.values())) > 1:
                    parts.append(f"task {task_id!r} {key} " + _per_method(values))
    return "; ".join(parts) or "their serialized forms"


def _per_method(values: dict[str, str]) -> str:
    return (
        "(" + " vs ".join(f"{method}: {value or 'none'}" for method, value in values.items()) + ")"
    )


def check_tasks(
    settings: Settings, method: str, documents: dict[str, SerializedDag], timeout: float
) -> list[TaskRun]:
    """Run each task of ``documents`` once under ``method``, in each Dag's order, each
    for ``timeout`` seconds at most (a child that cannot unpickle its work makes a
    ``multiprocessing.Pool`` wait forever). A mapped task runs its first element, and
    the tasks downstream get the list of that one result; over an empty list it is
    skipped, as the scheduler skips it."""
    from spawnflow.services import testing

    runs = []
    for dag_id, document in documents.items():
        upstream: dict[tuple[str, str], str] = {}
        for task in document.tasks:
            if task.expand is not None and _maps_over_nothing(task.expand, upstream):
                runs.append(TaskRun(dag_id, task.task_id, method, TaskState.SKIPPED,
                                    "it is mapped over an empty list"))  # fmt: skip
                continue
            result = testing.run_task_once(
                settings,
                document,
                task.task_id,
                _quiet,
                method=method,
                upstream=upstream,
                timeout=timeout,
            )
            pushed = result.xcoms
            if task.expand is not None:  # the downstream tasks get a list of results
                pushed = {key: f"[{value}]" for key, value in pushed.items()}
            upstream.update({(task.task_id, key): v for key, v in pushed.items()})
            runs.append(TaskRun(dag_id, task.task_id, method, result.state, result.reason))
    return runs


def _maps_over_nothing(expand: dict, upstream: dict[tuple[str, str], str]) -> bool:
    """Whether a mapped task has no element, given the upstream XComs pushed so far (an
    upstream value that is not a list is the task's failure to report, not this)."""
    from spawnflow.sdk import mapping, xcom

    values = {}
    for ref in mapping.references(expand):
        text = upstream.get((ref["__xcom__"], ref.get("key", "return_value")))
        values[mapping.source_key(ref)] = None if text is None else xcom.decode(text)
    try:
        return not mapping.elements(expand, values)
    except ValueError:
        return False


def _quiet(note: str) -> None:
    """The notes ``tasks test`` prints (an XCom no task pushed): the table says enough."""


#: What a task that works under fork but not under the others most often does.
_CAUSES = (
    (("pickle", "Can't get attribute", "__main__"),
     "something the task hands to a child process (a lambda, a closure, an object defined "
     "in the Dag file) cannot be pickled, which spawn and forkserver need"),
    (("NameError", "AttributeError", "KeyError", "None"),
     "a child process expects module state that only a forked copy of its parent has"),
)  # fmt: skip


def task_differences(runs: list[TaskRun], succeeded: str) -> list[Difference]:
    """The tasks whose outcome depends on the start method."""
    found = []
    by_task: dict[tuple[str, str], list[TaskRun]] = {}
    for run in runs:
        by_task.setdefault((run.dag_id, run.task_id), []).append(run)
    for (dag_id, task_id), each in by_task.items():
        if len({r.state for r in each}) == 1:
            continue
        works = [r.method for r in each if r.state == succeeded]
        fails = [r for r in each if r.state != succeeded]
        reason = fails[0].reason or fails[0].state
        sentence = (
            f"task {task_id!r} of Dag {dag_id!r} succeeds under {', '.join(works) or 'none'} "
            f"but not under {', '.join(r.method for r in fails)}: {reason}"
        )
        cause = next((c for words, c in _CAUSES if any(w in reason for w in words)), None)
        found.append(Difference(sentence, cause))
    return found


@dataclass
class Report:
    """What ``dags check`` found: the parses, the task runs, and its verdict."""

    file: str
    parses: list[MethodParse]
    #: Empty with ``parse_only``, or when the file does not load under every method.
    runs: list[TaskRun]
    parse_only: bool

    @property
    def methods(self) -> list[str]:
        return [parse.method for parse in self.parses]

    @functools.cached_property
    def differences(self) -> list[Difference]:
        return differences(self.parses) + task_differences(self.runs, TaskState.SUCCESS)

    @functools.cached_property
    def failing_everywhere(self) -> dict[tuple[str, str], str]:
        """(dag id, task id) -> why, for each task that succeeded under no method: no
        difference, but no pass either (a mapped task skipped over an empty list passes)."""
        passed = (TaskState.SUCCESS, TaskState.SKIPPED)
        worked = {(r.dag_id, r.task_id) for r in self.runs if r.state in passed}
        return {(r.dag_id, r.task_id): r.reason or r.state for r in self.runs
                if (r.dag_id, r.task_id) not in worked}  # fmt: skip

    @property
    def verdict(self) -> str:
        """``same`` or ``one_method`` (passed), ``differs`` or ``fails``."""
        if self.differences:
            return "differs"
        if self.failing_everywhere or not all(p.ok and p.dags for p in self.parses):
            return "fails"
        return "same" if len(self.parses) > 1 else "one_method"

    @property
    def passed(self) -> bool:
        return self.verdict in ("same", "one_method")

    def summary(self) -> str:
        """The verdict in one sentence."""
        if not any(parse.dags for parse in self.parses):
            return f"{self.file} defines no Dag under any start method."
        verdict = self.verdict
        if verdict == "differs":
            return f"{len(self.differences)} difference(s) between start methods."
        if verdict == "fails" and not all(parse.ok for parse in self.parses):
            return f"{self.file} does not load under any start method."
        if verdict == "fails":
            return f"{len(self.failing_everywhere)} task(s) fail under every start method."
        what = "parsed" if self.parse_only else (
            f"parsed, and {len(self.runs) // len(self.parses)} task(s) ran"
        )  # fmt: skip
        if verdict == "one_method":
            return (f"Checked under {self.parses[0].method} only ({what}): no other start "
                    "method to compare with.")  # fmt: skip
        return f"Same result under every start method ({what})."

    def as_record(self) -> dict[str, Any]:
        """The report as one object, for ``--output json|yaml``."""
        outcomes: dict[tuple[str, str], dict[str, dict[str, str | None]]] = {}
        for run in self.runs:
            outcomes.setdefault((run.dag_id, run.task_id), {})[run.method] = {
                "state": run.state, "reason": run.reason,
            }  # fmt: skip
        return {
            "file": self.file,
            "methods": self.methods,
            "parse_only": self.parse_only,
            "parses": [
                {"method": p.method, "loads": p.ok, "error": p.error, "dags": sorted(p.dags),
                 "tasks": p.tasks, "seconds": round(p.seconds, 3)}
                for p in self.parses
            ],
            "tasks": [
                {"dag_id": dag_id, "task_id": task_id, "outcomes": by_method}
                for (dag_id, task_id), by_method in outcomes.items()
            ],
            "differences": [
                {"what": d.what, "likely_cause": d.likely_cause} for d in self.differences
            ],
            "failing_everywhere": [
                {"dag_id": dag_id, "task_id": task_id, "reason": reason}
                for (dag_id, task_id), reason in self.failing_everywhere.items()
            ],
            "verdict": self.verdict,
            "passed": self.passed,
            "summary": self.summary(),
        }  # fmt: skip
