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
import msgspec

from spawnflow.bootstrap import lifecycle, logs
from spawnflow.bootstrap import platform as platforms
from spawnflow.processors.dag_processor import isolation
from spawnflow.processors.dag_processor.messages import (
    MapPartition,
    ParseFile,
    ParseResult,
    PartitionMapped,
)
from spawnflow.sdk import loading, serialize
from spawnflow.sdk.dags import Dag
from spawnflow.sdk.partitions import MAX_PARTITION_KEY_LENGTH
from spawnflow.sdk.schedule import zone_from_name
from spawnflow.sdk.tasks import DagDefinitionError

# Whatever answering the manager needs is loaded before any Dag file runs: a helper
# in the Dags folder named like a standard module (resource.py, say) must not
# break the answer.
platforms.peak_rss_bytes()


def parse_file(
    channel, path: str, dags_folder: str | None = None, mappings: list[dict] | None = None
) -> None:
    """Import the Dag file at ``path`` and send its Dags (or its error) to the manager,
    with the answers to ``mappings`` (MapPartition fields): the partitions its Dags'
    own mappers map.

    Ends the process right after sending: threads the file started are not waited
    for, a copy of this process that the file forked at import sends nothing, and
    processes the file started (even ones that left our tree) are killed first.
    """
    own_pid = os.getpid()
    # Descendants the Dag file orphans (``setsid ... &``) come back to us to be killed.
    platforms.current().adopt_orphans()
    result = _parse(path, dags_folder, mappings)
    _leave_if_a_copy(own_pid)
    platforms.current().kill_descendants()
    _send(channel, result)
    # Only our own handlers: ones the Dag file installed could block the exit.
    logs.flush()
    os._exit(lifecycle.EXIT_OK)


def parse_files(channel, dags_folder: str | None = None, max_files: int = 1) -> None:
    """Parse the files the manager sends (ParseFile), one at a time, until it has no
    more (NoMoreFiles, or its end of the channel closed) or ``max_files`` are done.

    Between two files the process is put back as it was (see :mod:`.isolation`); a
    file that leaves behind what cannot be put back is the last this parser parses,
    and its result says why (``leaving``), so that the manager starts a fresh one.
    """
    own_pid = os.getpid()
    platforms.current().adopt_orphans()
    for done in range(1, max_files + 1):
        try:
            request = channel.recv()
        except EOFError:
            break
        if not isinstance(request, ParseFile):
            break  # NoMoreFiles
        before = isolation.Snapshot()
        result = _parse(request.path, dags_folder, request.mappings)
        _leave_if_a_copy(own_pid)
        leaving = _kill_what_it_started() or before.restore()
        if leaving is None and done == max_files:
            leaving = f"it parsed [dag_processor] parser_max_files ({max_files}) files"
        elif leaving is not None:
            leaving = f"{request.path}: {leaving}"
        _send(channel, msgspec.structs.replace(result, leaving=leaving))
        if leaving is not None:
            break
    logs.flush()
    os._exit(lifecycle.EXIT_OK)


def _parse(path: str, dags_folder: str | None, mappings: list[dict] | None) -> ParseResult:
    """Import the Dag file at ``path`` and serialize its Dags, or say why not."""
    started = time.perf_counter()
    try:
        content = Path(path).read_bytes()
    except OSError as unreadable:
        return _result(path, "", [], f"cannot read {path}: {unreadable.strerror}", started)
    loading.prepare_path(path, dags_folder)
    dags, found, error = _load(path)
    requests = [MapPartition(**fields) for fields in mappings or []]
    mapped = map_partitions(dags, requests) if error is None else []
    return _result(path, serialize.file_hash(content), found, error, started, mapped)


def _leave_if_a_copy(own_pid: int) -> None:
    if os.getpid() != own_pid:
        os._exit(0)  # a copy the Dag file forked at import: only the parser answers


def _kill_what_it_started() -> str | None:
    started = platforms.current().kill_descendants()
    return f"it started process {started[0].pid}" if started else None


def load_dags(path: str) -> tuple[list[serialize.SerializedDag], str | None]:
    """Import ``path`` and serialize the Dags it defines, or say why it cannot."""
    _, found, error = _load(path)
    return found, error


def _load(path: str) -> tuple[list[Dag], list[serialize.SerializedDag], str | None]:
    """The Dags ``path`` defines, serialized too; or the file's import error."""
    try:
        dags = loading.import_dag_file(path)
        return dags, [serialize.serialize(dag) for dag in dags], None
    except lifecycle.WarmStop:
        raise
    except SystemExit as stop:
        return [], [], f"{path} called sys.exit({stop.code!r}) while being imported"
    except DagDefinitionError as error:
        return [], [], str(error)
    except BaseException:  # noqa: BLE001 - whatever a Dag file raises is its import error
        return [], [], _traceback_from(path)


def map_partitions(dags: list[Dag], requests: list[MapPartition]) -> list[PartitionMapped]:
    """Answer each request with its Dag's mapper of the asset, as the Dag is now."""
    by_id = {dag.dag_id: dag for dag in dags}
    return [_map(by_id.get(request.dag_id), request) for request in requests]


def _map(dag: Dag | None, request: MapPartition) -> PartitionMapped:
    if dag is None:
        return PartitionMapped(request.id, None, "the Dag is no longer in its file")
    custom = dag.custom_mappers.get(request.uri)
    builtin = (dag.schedule.partition_mappers or {}).get(request.uri)
    try:
        if custom is not None:
            target = custom.target(request.key)
        elif builtin is not None:  # the Dag's mapper of the asset is no longer its own
            target = builtin.target(request.key, zone_from_name(dag.timezone))
        else:
            why = "the Dag no longer maps the asset's partitions"
            return PartitionMapped(request.id, None, why)
    except lifecycle.WarmStop:
        raise
    except Exception as error:  # noqa: BLE001 - the mapper is user code
        return PartitionMapped(request.id, None, f"{type(error).__name__}: {error}")
    if not isinstance(target, str) or not 0 < len(target) <= MAX_PARTITION_KEY_LENGTH:
        why = (f"the mapper returned {target!r}, not a partition key of 1 to "
               f"{MAX_PARTITION_KEY_LENGTH} characters")  # fmt: skip
        return PartitionMapped(request.id, None, why)
    return PartitionMapped(request.id, target)


def _traceback_from(path: str) -> str:
    """The traceback, starting at the Dag file's own frames (ours are noise to its author)."""
    kind, error, trace = sys.exc_info()
    frames = traceback.extract_tb(trace)
    first = next((i for i, frame in enumerate(frames) if frame.filename == path), 0)
    lines = ["Traceback (most recent call last):\n"]
    lines += traceback.format_list(frames[first:])
    lines += traceback.format_exception_only(kind, error)
    return "".join(lines).rstrip()


def _result(path: str, file_hash: str, dags: list, error: str | None, started: float,
            mapped: list[PartitionMapped] | None = None) -> ParseResult:  # fmt: skip
    return ParseResult(
        path=path, file_hash=file_hash, dags=dags, error=error,
        duration=time.perf_counter() - started, peak_rss=platforms.peak_rss_bytes(),
        mapped=mapped or [],
    )  # fmt: skip


def _send(channel, result: ParseResult) -> None:
    try:
        channel.send(result)
    except Exception as failure:  # noqa: BLE001 - the manager gets a result either way
        channel.send(msgspec.structs.replace(
            result, dags=[], mapped=[],
            error=f"spawnflow could not report the Dags of {result.path}: {failure!r}",
        ))  # fmt: skip
