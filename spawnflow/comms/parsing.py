"""Messages between the Dag processor and its file parsers."""

from __future__ import annotations

from spawnflow.bootstrap.wire import Message
from spawnflow.sdk.serialize import SerializedDag


class ParseResult(Message):
    """What a file parser found in one Dag file: its Dags, or why it could not load them."""

    path: str
    file_hash: str
    dags: list[SerializedDag]
    #: The import error (a traceback, or a definition error naming file, Dag and task).
    error: str | None
    #: Seconds the import and serialization took inside the parser.
    duration: float
    #: The parser's peak resident memory, where the OS reports it.
    peak_rss: int | None = None
