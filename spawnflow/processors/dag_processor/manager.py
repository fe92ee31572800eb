"""The Dag processor's manager (role ``dag-processor``): find Dag files, parse them in
children, store what they define.

Each pass lists the Dags folder (and the example Dags when ``[core] load_examples``),
picks the files that are new, changed or not parsed for ``refresh_interval`` (or that
hold a Dag whose own partition mapper has events to map, see
:mod:`~spawnflow.processors.dag_processor.partition_mapping`), and parses them with at
most ``parsing_processes`` children at once
(:mod:`~spawnflow.processors.dag_processor.parsing`): a timeout or a crash becomes the
file's import error.

A warm stop (SIGTERM, first Ctrl-C) lets the running parses finish within
``[core] stop_grace_period`` and starts no new one; a second request stops at once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from spawnflow.bootstrap import forkservers, launcher, lifecycle, logs, orm, outage
from spawnflow.bootstrap.settings import Settings
from spawnflow.processors.dag_processor import asset_refs, files, partition_mapping, store
from spawnflow.processors.dag_processor.parsing import ParserPool

T = TypeVar("T")

EXAMPLES_FOLDER = Path(__file__).parents[2] / "example_dags"

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
    #: Asset events mapped to a run by their Dag's own mapper.
    mapped: int = 0
    #: Parser processes started, and why those that left early did (a file left a
    #: thread, a process or a changed global behind: see ``isolation``).
    parsers: int = 0
    recycled: list[str] = field(default_factory=list)


class DagFileProcessorManager:
    """Parses Dag files in child processes and stores what they define.

    Constructing one has no side effects; :meth:`run` does the work.
    """

    def __init__(self, settings: Settings, *, on_pass=None):
        self.settings = settings
        #: Called with each PassSummary and the number of passes so far.
        self.on_pass = on_pass
        self.passes = 0
        #: Whether the Dags folder was missing at the last look (warned once).
        self.folder_missing = False

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
        except outage.GaveUp:
            log.warning("stopped while the database is out of reach; the files of this "
                        "pass are parsed again at the next start")  # fmt: skip
        except lifecycle.WarmStop:
            launcher.stop_children(grace=0)  # a second request: now
            raise
        return summaries

    def run_pass(self, *, everything: bool = False) -> PassSummary:
        """Parse the files that are due (or ``everything``) and store the results."""
        started = time.monotonic()
        self.passes += 1
        present = [str(path) for path in self.dag_files()]
        # An unmounted volume or a folder moved away is not every Dag deleted: keep
        # what was stored from it until the folder is back.
        keep_under = self._dags_folder() if self.folder_missing else None

        def look_up():
            with orm.session_scope() as session:
                forgotten = store.forget_missing_files(session, present, keep_under)
                asset_refs.refresh_activity(session)
                asset_refs.sync_watcher_triggers(session)
                mappings = partition_mapping.requested(session)
                failing = partition_mapping.failing_files(session) if mappings else set()
                return forgotten, store.known_files(session), mappings, failing

        forgotten, known, mappings, failing = _ride_out(look_up, "reading the known Dag files")
        due = present if everything else self._due(present, known)
        # Events wait for their Dag's own mapper: its file is parsed now, unless it
        # failed last time (then at its next parse, when it may have been fixed).
        due += [path for path in present if path in mappings and path not in due
                and path not in failing]  # fmt: skip
        summary = PassSummary(files=len(present), forgotten=forgotten)
        contested = []
        pool = ParserPool(self.settings)
        # Closed at once if storing gives up (a stop, the database away): see ParserPool.
        with contextlib.closing(pool.parse(due, mappings)) as outcomes:
            for outcome in outcomes:
                if outcome.kind == store.STOPPED:
                    continue  # cut short by a stop, not the file's fault: parse it next time
                recorded, mapped = self._record(outcome)
                summary.mapped += mapped
                if recorded.conflict:
                    contested.append(outcome)
                summary.parsed += 1
                summary.largest_parser_rss = max(summary.largest_parser_rss, outcome.peak_rss or 0)
        summary.parsers, summary.recycled = pool.started, pool.recycled
        if pool.started:
            # Between passes no parser runs: under forkserver, neither does the server of
            # ours that forked them (the next pass forks another from the shared one).
            forkservers.let_go("file-parser")
        # A Dag that moved from one file to another in this pass: once every file
        # has been stored, the file it left no longer holds it.
        for outcome in contested:
            self._record(outcome)  # its mapped partitions are answered: not again
        if summary.parsed:

            def settle() -> None:  # what the files said about assets and their watchers
                with orm.session_scope() as session:
                    asset_refs.refresh_activity(session)
                    asset_refs.sync_watcher_triggers(session)

            _ride_out(settle, "updating assets and their watchers")

        def count() -> tuple[int, dict[str, str]]:
            with orm.session_scope(write=False) as session:
                return store.totals(session, present)

        summary.dags, summary.errors = _ride_out(count, "counting the stored Dags")
        summary.seconds = time.monotonic() - started
        log.info(
            "pass finished", files=summary.files, parsed=summary.parsed, dags=summary.dags,
            errors=len(summary.errors), seconds=round(summary.seconds, 3),
            parsers=summary.parsers,
        )  # fmt: skip
        return summary

    def _record(self, outcome: store.Outcome) -> tuple[store.Recorded, int]:
        """Store one file's outcome, and the partitions its parser mapped, in a
        transaction of its own (again, after an outage); how many events it mapped."""

        def write() -> tuple[store.Recorded, int]:
            with orm.session_scope() as session:
                recorded = store.record(
                    session, outcome,
                    paused_at_creation=self.settings.core.dags_are_paused_at_creation,
                )  # fmt: skip
                return recorded, partition_mapping.answer(session, outcome.mapped)

        return _ride_out(write, f"storing the Dags of {outcome.path}")

    def _dags_folder(self) -> Path:
        return Path(self.settings.core.dags_folder).absolute()

    def dag_files(self) -> list[Path]:
        """Every Dag file: the Dags folder's, then the examples' if they are loaded.

        A Dags folder that is missing (never made, or gone since) is a WARNING naming
        it, once until it is back.
        """
        folder = self._dags_folder()
        missing = not folder.is_dir()
        if missing and not self.folder_missing:
            log.warning("the Dags folder does not exist; no Dags are read from it, and those "
                        "stored from it stay as they are", dags_folder=str(folder))  # fmt: skip
        elif self.folder_missing and not missing:
            log.warning("the Dags folder is back", dags_folder=str(folder))
        self.folder_missing = missing
        found = files.list_dag_files(folder)
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


def run(channel, *, once: bool = False, num_runs: int | None = None) -> None:
    """Entry point of a launched ``dag-processor`` child (``spawnflow standalone``)."""
    from spawnflow.bootstrap import settings as settings_module
    from spawnflow.comms import ComponentStatus

    def report(summary: PassSummary, passes: int) -> None:
        channel.send(ComponentStatus(
            role="dag-processor", loops=passes, idle=True,
            text=f"{summary.dags} Dag(s), {len(summary.errors)} import error(s)",
            import_errors=len(summary.errors),
        ))  # fmt: skip

    lifecycle.defer_warm_stop()  # finish running parses on the first request
    manager = DagFileProcessorManager(settings_module.current(), on_pass=report)
    manager.run(once=once, num_runs=num_runs)


def _ride_out(unit: Callable[[], T], what: str) -> T:
    """A unit of the Dag processor's work through a database outage; a stop request
    ends the wait (:class:`~spawnflow.bootstrap.outage.GaveUp`)."""
    return outage.ride_out(unit, what=what, give_up=lifecycle.stop_requested.is_set)
