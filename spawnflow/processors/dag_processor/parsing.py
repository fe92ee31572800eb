"""The Dag processor's parser children: at most ``parsing_processes`` at once.

Each parser is a ``file-parser`` child, launched under the Dag processor's start
method and serviced by one :class:`~spawnflow.bootstrap.watch.Watch`. It parses up to
``[dag_processor] parser_max_files`` files, one at a time, and is put back as it was
between two of them (:mod:`.isolation`); a file that leaves something behind that
cannot be undone is its parser's last. A file's ``file_parsing_timeout`` starts when
the file is sent to a parser that is ready, so a slow spawn (seconds on a busy
machine) never eats it; a parser that does not boot within ``[core]
child_boot_timeout`` is a crash of its own kind. A parse past its timeout is stopped
with its process tree and recorded as the file's import error, as is a parser that
crashed: either harms only the file it was parsing, the files after it go to a fresh
parser. A warm stop starts nothing new and gives the running parses ``[core]
stop_grace_period``; those still running then are stopped and parsed again next time.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

from spawnflow.bootstrap import launcher, lifecycle, logs, wire
from spawnflow.bootstrap.child import ChildBootError, ExitStatus, stop_many
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.watch import Watch, Watched
from spawnflow.processors.dag_processor import files, store
from spawnflow.processors.dag_processor.messages import NoMoreFiles, ParseFile, ParseResult

PARSER_TARGET = "spawnflow.processors.dag_processor.parser:parse_file"
BATCH_PARSER_TARGET = "spawnflow.processors.dag_processor.parser:parse_files"
#: How long a parser that answered may take to leave before it is killed.
LEAVING_GRACE = 2.0

log = logs.get_logger("spawnflow.dag_processor")


@dataclass
class _Parser:
    """A parser child and the file it was given, if any (its first is given at launch
    and sent once it is ready)."""

    child: launcher.Child
    path: str | None
    started: float
    #: It said it leaves, or was told to: it takes no more files.
    leaving: bool = False


class ParserPool:
    """Runs the parses of one pass; constructing one starts nothing.

    Each parser child takes up to ``[dag_processor] parser_max_files`` files, one at a
    time: the next waiting file is sent as soon as it answers for the last one.
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self.watch = Watch()
        self.parsers: dict[int, _Parser] = {}
        self.waiting: deque[str] = deque()
        self.finished: list[store.Outcome] = []
        self.mappings: dict[str, list[dict]] = {}
        #: Parser children started so far.
        self.started = 0
        #: Why parsers left early (before their share of files), one entry each.
        self.recycled: list[str] = []

    def parse(
        self, paths: list[str], mappings: dict[str, list[dict]] | None = None
    ) -> Generator[store.Outcome, None, None]:
        """Parse ``paths``; yield each file's Outcome as it is known. The parser of a
        file in ``mappings`` also maps those partitions (see :mod:`.partition_mapping`)."""
        self.mappings = mappings or {}
        self.waiting = deque(paths)
        grace_ends: float | None = None
        try:
            while self.waiting or self._parsing():
                if lifecycle.stop_requested.is_set():
                    self.waiting.clear()  # warm stop: finish what runs, start nothing new
                    self._dismiss_idle()
                    if grace_ends is None:
                        grace_ends = time.monotonic() + self.settings.core.stop_grace_period
                    elif time.monotonic() >= grace_ends:
                        self._stop_all()
                self._fill()
                # Bounded, so that a stop request is seen within half a second.
                self.watch.wait(timeout=0.5)
                # Refill before the caller stores the results: children parse meanwhile.
                if not lifecycle.stop_requested.is_set():
                    self._fill()
                found, self.finished = self.finished, []
                yield from found
        except GeneratorExit:
            # The caller stopped reading (it gave up storing, the database away): what
            # still parses would be stored by nobody.
            stop_many(self.watch.children(), grace=0)
            raise
        # Parsers that answered and are leaving: give them their moment, then kill.
        self._dismiss_idle()
        self.watch.until(lambda: not self.watch.watched, timeout=LEAVING_GRACE)
        for child in self.watch.children():
            child.stop(grace=0)

    def _parsing(self) -> bool:
        return any(parser.path is not None for parser in self.parsers.values())

    def _fill(self) -> None:
        """Start parsers for waiting files that no parser can take soon."""
        limit = self.settings.dag_processor.parsing_processes
        while self.waiting and sum(not p.leaving for p in self.parsers.values()) < limit:
            self._start(self.waiting.popleft())

    def _start(self, path: str) -> None:
        spec = launcher.ChildSpec(
            "file-parser", BATCH_PARSER_TARGET,
            {"dags_folder": str(self.settings.core.dags_folder),
             "max_files": self.settings.dag_processor.parser_max_files},
            settings=self.settings,
        )  # fmt: skip
        child = launcher.launch(spec)
        self.started += 1
        self.parsers[child.pid] = _Parser(child, path, time.monotonic())
        self.watch.add(
            child, on_ready=self._on_ready, on_message=self._on_message, on_exit=self._on_exit,
            on_deadline=self._on_deadline, on_boot_failure=self._on_boot_failure,
        )  # fmt: skip

    def _hand_out(self, watched: Watched, parser: _Parser) -> None:
        """Send ``parser`` its file, the next waiting one if it has none; or dismiss it."""
        if parser.path is None and self.waiting and not lifecycle.stop_requested.is_set():
            parser.path = self.waiting.popleft()
        if parser.path is None:
            self._dismiss(watched, parser)
            return
        parser.started = time.monotonic()
        try:
            watched.child.channel.send(ParseFile(parser.path, self.mappings.get(parser.path, [])))
        except OSError:  # it left after its last file: a fresh parser takes this one
            self.waiting.appendleft(parser.path)
            parser.path, parser.leaving = None, True
            return
        watched.set_deadline(self.settings.dag_processor.file_parsing_timeout)

    def _dismiss(self, watched: Watched, parser: _Parser) -> None:
        parser.leaving = True
        with contextlib.suppress(OSError):
            watched.child.channel.send(NoMoreFiles())
        watched.set_deadline(LEAVING_GRACE)

    def _dismiss_idle(self) -> None:
        for watched in self.watch.watched:
            parser = self.parsers.get(watched.child.pid)
            if parser and parser.path is None and not parser.leaving and watched.ready:
                self._dismiss(watched, parser)

    def _outcome(self, parser: _Parser, outcome: store.Outcome) -> None:
        parser.path = None
        self.finished.append(outcome)

    # -- what the watch reports -----------------------------------------------------

    def _on_ready(self, watched: Watched) -> None:
        parser = self.parsers.get(watched.child.pid)
        if parser is not None:
            self._hand_out(watched, parser)

    def _on_message(self, watched: Watched, message: wire.Message) -> None:
        parser = self.parsers.get(watched.child.pid)
        if parser is None or parser.path is None or not isinstance(message, ParseResult):
            return
        kind = store.IMPORT_ERROR if message.error else store.OK
        self._outcome(parser, store.Outcome(
            parser.path, kind, message.duration, message.file_hash, message.dags,
            message.error, message.peak_rss, message.mapped,
        ))  # fmt: skip
        if message.leaving is not None:
            log.debug("file parser leaves", parser_pid=watched.child.pid, why=message.leaving)
            if not message.leaving.startswith("it parsed [dag_processor] parser_max_files"):
                self.recycled.append(message.leaving)
            parser.leaving = True
            watched.set_deadline(LEAVING_GRACE)  # it leaves right after sending
        else:
            self._hand_out(watched, parser)

    def _on_exit(self, watched: Watched, status: ExitStatus) -> None:
        parser = self.parsers.pop(watched.child.pid, None)
        if parser is None or parser.path is None:
            return  # it answered (or was stopped) before it left
        self._outcome(parser, store.Outcome(
            parser.path, store.CRASH, time.monotonic() - parser.started, self._hash(parser),
            error=f"the process parsing {parser.path} {status.describe(meaning=False)} "
            "before it reported its Dags",
        ))  # fmt: skip

    def _on_boot_failure(self, watched: Watched, error: ChildBootError) -> None:
        parser = self.parsers.get(watched.child.pid)
        if parser is not None and parser.path is not None:
            parser.leaving = True
            self._outcome(parser, store.Outcome(
                parser.path, store.CRASH, time.monotonic() - parser.started, self._hash(parser),
                error=f"the parser for {parser.path} could not start: {str(error).rstrip('.')}",
            ))  # fmt: skip

    def _on_deadline(self, watched: Watched) -> None:
        parser = self.parsers.get(watched.child.pid)
        if parser is None or parser.path is None:  # it answered and did not leave in time
            watched.child.stop(grace=0)
            return
        path, elapsed = parser.path, time.monotonic() - parser.started
        parser.leaving = True
        status = watched.child.stop(grace=min(5.0, self.settings.core.stop_grace_period))
        log.warning("file parse stopped", path=path, status=status.describe())
        limit = self.settings.dag_processor.file_parsing_timeout
        mapping = len(self.mappings.get(path, []))
        doing = f"parsing and mapping {mapping} asset partition(s)" if mapping else "parsing"
        self._outcome(parser, store.Outcome(
            path, store.TIMEOUT, elapsed, self._hash(parser),
            error=f"{path} timed out after {limit:g} seconds of {doing}",
        ))  # fmt: skip

    def _stop_all(self) -> None:
        """The warm stop's grace period is over: stop what still parses, all at once."""
        parsing = [(p, p.path) for p in self.parsers.values() if p.path is not None]
        grace = min(5.0, self.settings.core.stop_grace_period)
        stop_many([parser.child for parser, _ in parsing], grace=grace)
        for parser, path in parsing:
            log.warning("file parse stopped", path=path, status=parser.child.exit_status)
            parser.leaving = True
            self._outcome(parser, store.Outcome(
                path, store.STOPPED, time.monotonic() - parser.started
            ))  # fmt: skip

    @staticmethod
    def _hash(parser: _Parser) -> str:
        return files.content_hash(Path(parser.path or "")) or ""
