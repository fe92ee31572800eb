"""The Dag processor's parser children: at most ``parsing_processes`` at once, one file each.

Each file gets a ``file-parser`` child, launched under the Dag processor's start
method and serviced by one :class:`~spawnflow.bootstrap.watch.Watch`. A file's
``file_parsing_timeout`` starts when its parser reports ready, so a slow spawn (seconds
on a busy machine) never eats it; a parser that does not boot within
``[core] child_boot_timeout`` is a crash of its own kind. A parse past its timeout is
stopped with its process tree and recorded as the file's import error, as is a parser
that crashed. A warm stop starts nothing new and gives the running parses
``[core] stop_grace_period``; those still running then are stopped and parsed again
next time.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from spawnflow.bootstrap import launcher, lifecycle, logs, wire
from spawnflow.bootstrap.child import ChildBootError, ExitStatus, stop_many
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.watch import Watch, Watched
from spawnflow.processors.dag_processor import files, store
from spawnflow.processors.dag_processor.messages import ParseResult

PARSER_TARGET = "spawnflow.processors.dag_processor.parser:parse_file"
#: How long a parser that answered may take to leave before it is killed.
LEAVING_GRACE = 2.0

log = logs.get_logger("spawnflow.dag_processor")


@dataclass
class _Parse:
    path: str
    child: launcher.Child
    started: float
    answered: bool = False


class ParserPool:
    """Runs the parses of one pass; constructing one starts nothing."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.watch = Watch()
        self.running: dict[int, _Parse] = {}
        self.finished: list[store.Outcome] = []
        self.mappings: dict[str, list[dict]] = {}

    def parse(
        self, paths: list[str], mappings: dict[str, list[dict]] | None = None
    ) -> Iterator[store.Outcome]:
        """Parse ``paths``; yield each file's Outcome as it is known. The parser of a
        file in ``mappings`` also maps those partitions (see :mod:`.partition_mapping`)."""
        self.mappings = mappings or {}
        waiting = deque(paths)
        limit = self.settings.dag_processor.parsing_processes
        grace_ends: float | None = None
        try:
            while waiting or self.running:
                if lifecycle.stop_requested.is_set():
                    waiting.clear()  # warm stop: finish what runs, start nothing new
                    if grace_ends is None:
                        grace_ends = time.monotonic() + self.settings.core.stop_grace_period
                    elif time.monotonic() >= grace_ends:
                        self._stop_all()
                self._fill(waiting, limit)
                # Bounded, so that a stop request is seen within half a second.
                self.watch.wait(timeout=0.5)
                # Refill before the caller stores the results: children parse meanwhile.
                if not lifecycle.stop_requested.is_set():
                    self._fill(waiting, limit)
                found, self.finished = self.finished, []
                yield from found
        except GeneratorExit:
            # The caller stopped reading (it gave up storing, the database away): what
            # still parses would be stored by nobody.
            stop_many(self.watch.children(), grace=0)
            raise
        # Parsers that answered and are leaving: give them their moment, then kill.
        self.watch.until(lambda: not self.watch.watched, timeout=LEAVING_GRACE)
        for child in self.watch.children():
            child.stop(grace=0)

    def _fill(self, waiting: deque[str], limit: int) -> None:
        while waiting and len(self.running) < limit:
            self._start(waiting.popleft())

    def _start(self, path: str) -> None:
        spec = launcher.ChildSpec(
            "file-parser", PARSER_TARGET,
            {"path": path, "dags_folder": str(self.settings.core.dags_folder),
             "mappings": self.mappings.get(path, [])},
            settings=self.settings,
        )  # fmt: skip
        child = launcher.launch(spec)
        parse = _Parse(path, child, time.monotonic())
        self.running[child.pid] = parse
        self.watch.add(
            child, on_ready=self._on_ready, on_message=self._on_message, on_exit=self._on_exit,
            on_deadline=self._on_deadline, on_boot_failure=self._on_boot_failure,
        )  # fmt: skip

    def _outcome(self, parse: _Parse, outcome: store.Outcome) -> None:
        parse.answered = True
        self.running.pop(parse.child.pid, None)
        self.finished.append(outcome)

    # -- what the watch reports -----------------------------------------------------

    def _on_ready(self, watched: Watched) -> None:
        watched.set_deadline(self.settings.dag_processor.file_parsing_timeout)

    def _on_message(self, watched: Watched, message: wire.Message) -> None:
        parse = self.running.get(watched.child.pid)
        if parse is None or not isinstance(message, ParseResult):
            return
        kind = store.IMPORT_ERROR if message.error else store.OK
        self._outcome(parse, store.Outcome(
            parse.path, kind, message.duration, message.file_hash, message.dags,
            message.error, message.peak_rss, message.mapped,
        ))  # fmt: skip
        watched.set_deadline(LEAVING_GRACE)  # it leaves right after sending

    def _on_exit(self, watched: Watched, status: ExitStatus) -> None:
        parse = self.running.get(watched.child.pid)
        if parse is None:
            return  # it answered (or was stopped) before it left
        self._outcome(parse, store.Outcome(
            parse.path, store.CRASH, time.monotonic() - parse.started, self._hash(parse),
            error=f"the process parsing {parse.path} {status.describe(meaning=False)} "
            "before it reported its Dags",
        ))  # fmt: skip

    def _on_boot_failure(self, watched: Watched, error: ChildBootError) -> None:
        parse = self.running.get(watched.child.pid)
        if parse is not None:
            self._outcome(parse, store.Outcome(
                parse.path, store.CRASH, time.monotonic() - parse.started, self._hash(parse),
                error=f"the parser for {parse.path} could not start: {str(error).rstrip('.')}",
            ))  # fmt: skip

    def _on_deadline(self, watched: Watched) -> None:
        parse = self.running.get(watched.child.pid)
        if parse is None:  # it answered and did not leave in time
            watched.child.stop(grace=0)
            return
        elapsed = time.monotonic() - parse.started
        parse.answered = True
        status = watched.child.stop(grace=min(5.0, self.settings.core.stop_grace_period))
        log.warning("file parse stopped", path=parse.path, status=status.describe())
        limit = self.settings.dag_processor.file_parsing_timeout
        mapping = len(self.mappings.get(parse.path, []))
        doing = f"parsing and mapping {mapping} asset partition(s)" if mapping else "parsing"
        self._outcome(parse, store.Outcome(
            parse.path, store.TIMEOUT, elapsed, self._hash(parse),
            error=f"{parse.path} timed out after {limit:g} seconds of {doing}",
        ))  # fmt: skip

    def _stop_all(self) -> None:
        """The warm stop's grace period is over: stop what still parses, all at once."""
        parses = list(self.running.values())
        stop_many([p.child for p in parses], grace=min(5.0, self.settings.core.stop_grace_period))
        for parse in parses:
            log.warning("file parse stopped", path=parse.path, status=parse.child.exit_status)
            self._outcome(parse, store.Outcome(
                parse.path, store.STOPPED, time.monotonic() - parse.started
            ))  # fmt: skip

    @staticmethod
    def _hash(parse: _Parse) -> str:
        return files.content_hash(Path(parse.path)) or ""
