"""The file parser (role ``file-parser``): import one Dag file, report what it defines.

Runs in a child of its own, started by the launcher, and never touches the
database or imports SQLAlchemy. A Dag file is user code: it may raise, hang,
crash the interpreter, start threads, fork or open connections at import. The
parser reports any exception as an import error; the manager handles the rest
(timeouts, crashes) by watching the child from outside.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

# Imported here rather than on first use: the forkserver preloads this module, so
# its children start with the SDK and the cron parser already loaded.
import cronsim  # noqa: F401

from spawnflow.bootstrap import lifecycle, logs
from spawnflow.bootstrap import platform as platforms
from spawnflow.comms.parsing import ParseResult
from spawnflow.sdk import loading, serialize
from spawnflow.sdk.tasks import DagDefinitionError

# Whatever answering the manager needs is loaded before any Dag file runs: a helper
# in the Dags folder named like a standard module (resource.py, say) must not
# break the answer.
platforms.peak_rss_bytes()


def parse_file(channel, path: str, dags_folder: str | None = None) -> None:
    """Import the Dag file at ``path`` and send its Dags (or its error) to the manager.

    Ends the process right after sending: threads the file started are not waited
    for, a copy of this process that the file forked at import sends nothing, and
    processes the file started (even ones that left our tree) are killed first.
    """
    own_pid = os.getpid()
    started = time.perf_counter()
    # Descendants the Dag file orphans (``setsid ... &``) come back to us to be killed.
    platforms.current().adopt_orphans()
    try:
        content = Path(path).read_bytes()
    except OSError as error:
        _send(channel, own_pid, path, "", [], f"cannot read {path}: {error.strerror}", started)
        return
    loading.prepare_path(path, dags_folder)
    found, error = load_dags(path)
    _send(channel, own_pid, path, serialize.file_hash(content), found, error, started)


def load_dags(path: str) -> tuple[list[serialize.SerializedDag], str | None]:
    """Import ``path`` and serialize the Dags it defines, or say why it cannot."""
    try:
        return [serialize.serialize(dag) for dag in loading.import_dag_file(path)], None
    except lifecycle.WarmStop:
        raise
    except SystemExit as stop:
        return [], f"{path} called sys.exit({stop.code!r}) while being imported"
    except DagDefinitionError as error:
        return [], str(error)
    except BaseException:  # noqa: BLE001 - whatever a Dag file raises is its import error
        return [], _traceback_from(path)


def _traceback_from(path: str) -> str:
    """The traceback, starting at the Dag file's own frames (ours are noise to its author)."""
    kind, error, trace = sys.exc_info()
    frames = traceback.extract_tb(trace)
    first = next((i for i, frame in enumerate(frames) if frame.filename == path), 0)
    lines = ["Traceback (most recent call last):\n"]
    lines += traceback.format_list(frames[first:])
    lines += traceback.format_exception_only(kind, error)
    return "".join(lines).rstrip()


def _send(channel, own_pid: int, path: str, file_hash: str, dags: list, error: str | None,
          started: float) -> None:  # fmt: skip
    if os.getpid() != own_pid:
        os._exit(0)  # a copy the Dag file forked at import: only the parser answers
    platforms.current().kill_descendants()
    try:
        result = ParseResult(
            path=path, file_hash=file_hash, dags=dags, error=error,
            duration=time.perf_counter() - started, peak_rss=platforms.peak_rss_bytes(),
        )  # fmt: skip
        channel.send(result)
    except Exception as failure:  # noqa: BLE001 - the manager gets a result either way
        channel.send(ParseResult(
            path=path, file_hash=file_hash, dags=[], duration=time.perf_counter() - started,
            error=f"spawnflow could not report the Dags of {path}: {failure!r}",
        ))  # fmt: skip
    # Only our own handlers: ones the Dag file installed could block the exit.
    logs.flush()
    os._exit(lifecycle.EXIT_OK)
