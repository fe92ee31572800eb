"""The try's log file: JSON lines from the supervisor and the task's output.

The task process appends its own log lines to the same file (its log file, see the
launcher); every line has the one shape of :func:`spawnflow.bootstrap.logs.line`, so a
reader parses one kind of line. The task's stdout and stderr are lines of the task
process (its pid, role ``task``, logger ``task.stdout`` or ``task.stderr``, and
``stream``), timed when the supervisor reads them. A try's log is never rotated.

A disk that fills or turns read-only while a task runs must not end the try: the
log says so once (in the worker's own log and on its stderr) and drops lines until
writes work again; the task and its outcome go on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

from spawnflow.bootstrap import logs

LOGGER = "spawnflow.supervisor"
#: The role of the supervisor's lines in a try's log (its process's role is the
#: executor's worker, or the CLI's for ``tasks test``).
ROLE = "supervisor"

log = logs.get_logger(LOGGER)


class AttemptLog:
    """Appends to ``<logs>/dag_id=…/run_id=…/task_id=…/attempt=N.log``."""

    def __init__(self, path: Path):
        self.path = path
        self._file: IO[str] | None = None
        self._failing = False
        self._partial = {"stdout": "", "stderr": ""}
        #: The task process's pid, which its output lines carry (set once it is launched).
        self.task_pid = 0
        self._open()

    def event(self, event: str, level: str = "info", **fields: Any) -> None:
        """Write the supervisor's ``event`` at ``level`` (fields that are None are left out)."""
        self._write(logs.line(level=level, logger=LOGGER, event=event, pid=os.getpid(),
                              role=ROLE, fields=fields))  # fmt: skip

    def output(self, stream: str, data: bytes, final: bool = False) -> None:
        """Append what the task process wrote on ``stream``, one JSON line per line of text."""
        text = self._partial[stream] + data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self._partial[stream] = "" if final else lines.pop()
        for line in lines:
            if line or not final:
                self._write(logs.line(
                    level="info", logger=f"task.{stream}", event=line.rstrip("\r"),
                    pid=self.task_pid, role="task", fields={"stream": stream},
                ))  # fmt: skip

    def close(self) -> None:
        for stream, rest in self._partial.items():
            if rest:
                self.output(stream, b"", final=True)
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass  # what was buffered is lost with the disk; the try's outcome is not
            self._file = None

    def _open(self) -> bool:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        except OSError as error:
            self._failed(error)
            return False
        return True

    def _write(self, line: dict[str, Any]) -> None:
        if self._file is None and not self._open():
            return
        assert self._file is not None  # opened just above
        try:
            self._file.write(logs.dumps(line) + "\n")
            self._file.flush()
        except OSError as error:
            self._failed(error)
            file, self._file = self._file, None  # the next line opens the file again
            try:
                file.close()
            except OSError:
                pass
            return
        if self._failing:
            self._failing = False
            log.warning("the try's log file can be written again", log_file=str(self.path))

    def _failed(self, error: OSError) -> None:
        if self._failing:
            return
        self._failing = True
        why = error.strerror or type(error).__name__
        log.warning("cannot write the try's log file; its lines are dropped until it can",
                    log_file=str(self.path), error=why)  # fmt: skip
