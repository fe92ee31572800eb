"""A role's log file, rotated by size: ``<role>.log`` becomes ``<role>.log.1`` and so on.

Several processes may append to one role's file (the executor's workers share
``executor-worker.log``, the file parsers ``file-parser.log``). Each of them rotates it
when the file *at the path* reaches the size; one that finds the path naming another
file than the one it holds open (another writer rotated it) opens the new one instead.
Rotations are serialised by a lock, the file ``<file>.lock`` which a rotating writer
creates (exclusively: every OS does that atomically, and no ``fcntl`` or ``msvcrt``
is needed) and removes: a writer that decided to rotate sees, once it holds the lock,
whether another one rotated meanwhile, and then follows it instead. (The standard
library's rollover, run by two processes at once, overwrites the backups the other
just renamed: whole files of lines were lost.)

On Windows a file that another process holds open cannot be renamed: the rotation
fails before anything moved (the file is renamed first, the older files shifted only
then), says so once on stderr, and the file grows until a try a minute later
succeeds.

A module of its own: ``logging.handlers`` costs a child a few milliseconds to import,
and a task process, whose file (the try's log) is never rotated, does not need it
(under forkserver every child has it from its server's preload, paid once).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import logging.handlers
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from spawnflow.bootstrap.logfiles import LogFileHandler, say_on_stderr, strerror_of

#: Seconds between two tries to rotate a file whose last rotation failed.
ROTATION_RETRY_SECONDS = 60.0
#: Seconds a writer waits for another one's rotation (milliseconds, usually) to end.
LOCK_PATIENCE_SECONDS = 10.0
#: A lock this old was left by a writer that died while it rotated.
STALE_LOCK_SECONDS = 60.0


class RotatingLogFileHandler(LogFileHandler, logging.handlers.RotatingFileHandler):
    """A :class:`LogFileHandler` whose file is rotated once it reaches a size, safely
    when several processes append to it (see the module's docstring): a rotation that
    fails says so once and never costs a line."""

    #: The device and inode of the file this handler holds open (set by _open).
    _opened: tuple[int, int] | None = None
    _retry_at = 0.0
    _rotation_failing = False

    def __init__(self, path: Path, max_bytes: int, backup_count: int) -> None:
        logging.handlers.RotatingFileHandler.__init__(
            self, path, maxBytes=max_bytes, backupCount=backup_count, encoding="utf-8"
        )

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is not None and self.maxBytes > 0:
            try:
                self._rotate_if_due()
            except OSError as error:  # Windows: another process holds the file open, say
                self._rotation_failed(error)
        LogFileHandler.emit(self, record)  # reopens the file if the rotation closed it

    def _open(self):  # type: ignore[no-untyped-def]
        stream = super()._open()
        self._opened = _identity(os.fstat(stream.fileno()))
        return stream

    def _rotate_if_due(self) -> None:
        try:
            found = os.stat(self.baseFilename)
        except FileNotFoundError:
            found = None  # another writer renamed it and has not written yet
        if found is not None and not stat.S_ISREG(found.st_mode):
            return  # never rename a device or a pipe (a test's /dev/full, say)
        if found is None or _identity(found) != self._opened:
            self._reopen()  # rotated by another writer: follow it to the new file
            return
        # The size before this line: a rotated file may end up to one line larger.
        if found.st_size < self.maxBytes or time.monotonic() < self._retry_at:
            return
        self.doRollover()
        if self._rotation_failing:
            self._rotation_failing = False
            say_on_stderr(f"spawnflow: the log file {self.baseFilename} is rotated again")

    def doRollover(self) -> None:
        """Rotate the file, unless another writer did since this one looked."""
        base = self.baseFilename
        with _rotation_lock(f"{base}.lock"):
            if _identity_at(base) == self._opened:
                stream, self.stream = self.stream, None
                if stream is not None:
                    stream.close()  # Windows renames no open file, not even ours
                # The file itself first: where that fails (Windows, another writer holds
                # it open) nothing has moved yet. A failure after it leaves the lines in
                # <file>.<pid>.rotating.
                pending = f"{base}.{os.getpid()}.rotating"
                os.rename(base, pending)
                for number in range(self.backupCount - 1, 0, -1):
                    if os.path.exists(f"{base}.{number}"):
                        os.replace(f"{base}.{number}", f"{base}.{number + 1}")
                os.replace(pending, f"{base}.1")
            # else another writer rotated it since this one looked: follow it
        self._reopen()

    def _reopen(self) -> None:
        stream, self.stream = self.stream, None
        try:
            if stream is not None:
                stream.close()
            self.stream = self._open()
        except OSError:
            pass  # the line's write opens it again, and says so if it cannot

    def _rotation_failed(self, error: OSError) -> None:
        self._retry_at = time.monotonic() + ROTATION_RETRY_SECONDS
        if not self._rotation_failing:
            self._rotation_failing = True
            held = isinstance(error, PermissionError)
            held_text = "; another process may hold it open" if held else ""
            say_on_stderr(
                f"spawnflow: cannot rotate the log file {self.baseFilename} "
                f"({strerror_of(error)}{held_text}); it grows until it can be rotated"
            )


def _identity(found: os.stat_result) -> tuple[int, int]:
    return found.st_dev, found.st_ino


def _identity_at(path: str) -> tuple[int, int] | None:
    try:
        return _identity(os.stat(path))
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def _rotation_lock(path: str) -> Iterator[None]:
    """Hold the lock ``path`` (a file only its holder made) while the block runs; wait
    for another holder up to :data:`LOCK_PATIENCE_SECONDS`, then raise TimeoutError."""
    give_up_at, pause = time.monotonic() + LOCK_PATIENCE_SECONDS, 0.001
    while True:
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            break
        except FileExistsError:
            if _age(path) > STALE_LOCK_SECONDS:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)  # its writer died while it rotated
                continue
            if time.monotonic() >= give_up_at:
                raise TimeoutError(
                    errno.ETIMEDOUT, "another process's rotation did not end", path
                ) from None
            time.sleep(pause)  # another writer's rotation: a few milliseconds
            pause = min(2 * pause, 0.05)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)


def _age(path: str) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0  # let go of meanwhile: try again
