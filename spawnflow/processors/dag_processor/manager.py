"""The Dag processor's manager (role ``dag-processor``): find Dag files, parse them in
children, store what they define.

Each pass lists the Dags folder (and the example Dags when ``[core] load_examples``),
picks the files that are new, changed or not parsed for ``refresh_interval``, and
parses them with at most ``parsing_processes`` children at once, each started by the
launcher under the dag processor's start method. The manager enforces
``file_parsing_timeout`` itself, by stopping the child's process tree, and records
the timeout as the file's import error, as it records a child that crashed.

A warm stop (SIGTERM, first Ctrl-C) lets the running parses finish within
``[core] stop_grace_period`` and starts no new one; a second request stops at once.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from spawnflow.bootstrap import launcher, lifecycle, logs, orm, wire
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms.parsing import ParseResult
from spawnflow.processors.dag_processor import files, store

EXAMPLES_FOLDER = Path(__file__).parents[2] / "example_dags"
PARSER_TARGET = "spawnflow.processors.dag_processor.parser:parse_file"

log = logs.get_logger("spawnflow.dag_processor")


@dataclass
class PassSummary:
    """What one pass over the files did."""

    files: int = 0
    parsed: int = 0
    #: Active Dags and import errors of the present files once the pass was stored.
    dags: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    forgotten: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: The largest peak resident memory a parser reported in this pass.
    largest_parser_rss: int = 0


@dataclass
class _Parse:
    path: str
    child: launcher.Child
    started: float
    deadline: float


class DagFileProcessorManager:
    """Parses Dag files in child processes and stores what they define.

    Constructing one has no side effects; :meth:`run` does the work.
    """

    def __init__(self, settings: Settings, *, method: str | None = None, on_pass=None):
        self.settings = settings
        self.method = method
        #: Called with each PassSummary and the number of passes so far.
        self.on_pass = on_pass
        self.passes = 0

    # -- the loop -------------------------------------------------------------------

    def run(self, *, once: bool = False, num_runs: int | None = None) -> list[PassSummary]:
        """Run passes until stopped, or once (every file), or ``num_runs`` times."""
        summaries = []
        try:
            while not lifecycle.stop_requested.is_set():
                summaries.append(self.run_pass(everything=once))
                if self.on_pass is not None:
                    self.on_pass(summaries[-1], self.passes)
                if once or (num_runs is not None and self.passes >= num_runs):
                    break
                lifecycle.stop_requested.wait(self.settings.dag_processor.poll_interval)
        except lifecycle.WarmStop:
            launcher.stop_children(grace=0)  # a second request: now
            raise
        return summaries

    def run_pass(self, *, everything: bool = False) -> PassSummary:
        """Parse the files that are due (or ``everything``) and store the results."""
        started = time.monotonic()
        self.passes += 1
        present = [str(path) for path in self.dag_files()]
        with orm.session_scope() as session:
            forgotten = store.forget_missing_files(session, present)
            known = store.known_files(session)
        due = present if everything else self._due(present, known)
        summary = PassSummary(files=len(present), forgotten=forgotten)
        contested = []
        for outcome in self._parse(due):
            if outcome.kind == store.STOPPED:
                continue  # cut short by a stop, not the file's fault: parse it next time
            if self._record(outcome).conflict:
                contested.append(outcome)
            summary.parsed += 1
            summary.largest_parser_rss = max(summary.largest_parser_rss, outcome.peak_rss or 0)
        # A Dag that moved from one file to another in this pass: once every file
        # has been stored, the file it left no longer holds it.
        for outcome in contested:
            self._record(outcome)
        with orm.session_scope() as session:
            summary.dags, summary.errors = store.totals(session, present)
        summary.seconds = time.monotonic() - started
        log.info(
            "pass finished", files=summary.files, parsed=summary.parsed, dags=summary.dags,
            errors=len(summary.errors), seconds=round(summary.seconds, 3),
        )  # fmt: skip
        return summary

    def _record(self, outcome: store.Outcome) -> store.Recorded:
        """Store one file's outcome in a transaction of its own."""
        with orm.session_scope() as session:
            return store.record(
                session, outcome, paused_at_creation=self.settings.core.dags_are_paused_at_creation
            )

    def dag_files(self) -> list[Path]:
        """Every Dag file: the Dags folder's, then the examples' if they are loaded."""
        found = files.list_dag_files(self.settings.core.dags_folder)
        if self.settings.core.load_examples:
            found += [p for p in files.list_dag_files(EXAMPLES_FOLDER) if p.name != "__init__.py"]
        return found

    def _due(self, present: list[str], known: dict[str, store.FileRecord]) -> list[str]:
        refresh = self.settings.dag_processor.refresh_interval
        now = store.utcnow()
        due = []
        for path in present:
            seen = known.get(path)
            if (
                seen is None
                or files.content_hash(Path(path)) != seen.content_hash
                or (now - seen.last_parsed).total_seconds() >= refresh
            ):
                due.append(path)
        return due

    # -- parsing in children --------------------------------------------------------

    def _parse(self, paths: list[str]):
        """Parse ``paths`` with at most ``parsing_processes`` children; yield each Outcome."""
        from multiprocess.connection import wait

        waiting = deque(paths)
        running: list[_Parse] = []
        #: Parsers that answered and are leaving: reaped without holding up the loop.
        exiting: list[tuple[launcher.Child, float]] = []
        limit = self.settings.dag_processor.parsing_processes
        timeout = self.settings.dag_processor.file_parsing_timeout
        grace_ends: float | None = None
        while waiting or running:
            if lifecycle.stop_requested.is_set():
                waiting.clear()  # warm stop: finish what runs, start nothing new
                if grace_ends is None:
                    grace_ends = time.monotonic() + self.settings.core.stop_grace_period
            while waiting and len(running) < limit:
                running.append(self._start(waiting.popleft(), timeout))
            now = time.monotonic()
            next_deadline = min(p.deadline for p in running)
            if grace_ends is not None:
                next_deadline = min(next_deadline, grace_ends)
            objects = [p.child.channel.connection for p in running] + [
                p.child.sentinel for p in running
            ]
            # Bounded, so that a stop request is seen within half a second.
            wait(objects, timeout=max(0.0, min(next_deadline - now, 0.5)))
            finished = []
            for parse in list(running):
                outcome = self._check(parse, grace_ends)
                if outcome is not None:
                    running.remove(parse)
                    finished.append(outcome)
                    if parse.child.exit_status is None:
                        exiting.append((parse.child, time.monotonic() + 2.0))
            exiting = self._reap_exiting(exiting)
            # Refill the free slots before the caller stores the results: the
            # children parse while the manager writes.
            while waiting and len(running) < limit and not lifecycle.stop_requested.is_set():
                running.append(self._start(waiting.popleft(), timeout))
            yield from finished
        for child, _ in exiting:
            if child.join(timeout=2.0) is None:
                child.stop(grace=0)

    def _reap_exiting(self, exiting: list) -> list:
        """Reap parsers that left; kill those that outstay their two seconds."""
        still = []
        for child, deadline in exiting:
            if child.join(timeout=0) is not None:
                continue
            if time.monotonic() >= deadline:
                child.stop(grace=0)
                continue
            still.append((child, deadline))
        return still

    def _read(self, parse: _Parse) -> store.Outcome | None:
        """The parse's outcome if its result is on the channel (past the boot messages)."""
        channel = parse.child.channel
        while channel.poll():
            try:
                message = channel.recv()
            except (EOFError, OSError):
                return None
            if isinstance(message, ParseResult):
                kind = store.IMPORT_ERROR if message.error else store.OK
                return store.Outcome(
                    parse.path, kind, message.duration, message.file_hash, message.dags,
                    message.error, message.peak_rss,
                )  # fmt: skip
            if isinstance(message, wire.BootFailed):
                return store.Outcome(
                    parse.path, store.CRASH, time.monotonic() - parse.started,
                    error=f"the parser for {parse.path} could not start: {message.message}",
                )  # fmt: skip
        return None

    def _start(self, path: str, timeout: float) -> _Parse:
        spec = launcher.ChildSpec(
            "file-parser",
            PARSER_TARGET,
            {"path": path, "dags_folder": str(self.settings.core.dags_folder)},
            settings=self.settings,
        )
        child = launcher.launch(spec, method=self.method, component="dag_processor")
        started = time.monotonic()
        return _Parse(path, child, started, started + timeout)

    def _check(self, parse: _Parse, grace_ends: float | None) -> store.Outcome | None:
        """The outcome of ``parse`` if it has one now: a result, a crash or a timeout."""
        child, now = parse.child, time.monotonic()
        elapsed = now - parse.started
        outcome = self._read(parse)
        if outcome is None and not child.is_alive():
            # It may have sent its result just before exiting: read once more.
            outcome = self._read(parse)
            status = child.join(timeout=30)
            if outcome is None:
                return store.Outcome(
                    parse.path, store.CRASH, elapsed, files.content_hash(Path(parse.path)) or "",
                    error=f"the process parsing {parse.path} {status.describe(meaning=False)} "
                    "before it reported its Dags",
                )  # fmt: skip
        if outcome is not None:
            return outcome  # the parser leaves right after sending; reaped by the loop
        stopping = grace_ends is not None and now >= grace_ends
        if now >= parse.deadline or stopping:
            status = child.stop(grace=min(5.0, self.settings.core.stop_grace_period))
            log.warning("file parse stopped", path=parse.path, status=status.describe())
            if stopping:
                return store.Outcome(parse.path, store.STOPPED, elapsed)
            limit = self.settings.dag_processor.file_parsing_timeout
            return store.Outcome(
                parse.path, store.TIMEOUT, elapsed, files.content_hash(Path(parse.path)) or "",
                error=f"{parse.path} timed out after {limit:g} seconds of parsing",
            )  # fmt: skip
        return None


def run(channel, *, once: bool = False, num_runs: int | None = None) -> None:
    """Entry point of a launched ``dag-processor`` child (``spawnflow standalone``)."""
    from spawnflow.bootstrap import settings as settings_module
    from spawnflow.comms import ComponentStatus

    def report(summary: PassSummary, passes: int) -> None:
        channel.send(ComponentStatus(
            role="dag-processor", loops=passes, idle=True,
            text=f"{summary.dags} Dag(s), {len(summary.errors)} import error(s)",
        ))  # fmt: skip

    lifecycle.defer_warm_stop()  # finish running parses on the first request
    manager = DagFileProcessorManager(settings_module.current(), on_pass=report)
    manager.run(once=once, num_runs=num_runs)
