"""Messages between the Dag processor and its file parsers (they carry serialized Dags,
so they sit above the SDK, not in ``spawnflow.comms``)."""

from __future__ import annotations

import msgspec

from spawnflow.bootstrap.wire import Message
from spawnflow.sdk.serialize import SerializedDag


class MapPartition(msgspec.Struct, frozen=True):
    """An event's partition ``key`` of asset ``uri`` that Dag ``dag_id``'s own mapper maps
    (``id``: its PendingAssetMapping row)."""

    id: int
    dag_id: str
    uri: str
    key: str


class PartitionMapped(msgspec.Struct, frozen=True):
    """The answer to MapPartition ``id``: the run's partition key, or why there is none."""

    id: int
    target: str | None
    error: str | None = None


class ParseFile(Message, frozen=True):
    """To a parser that parses several files: import ``path`` next, and map ``mappings``
    (MapPartition fields) with its Dags."""

    path: str
    mappings: list[dict] = []


class NoMoreFiles(Message, frozen=True):
    """To a parser waiting for its next file: there is none, leave."""


class ParseResult(Message, frozen=True):
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
    #: The answers to the partitions it was asked to map (none with an import error).
    mapped: list[PartitionMapped] = []
    #: Set when the parser leaves after this file, and why (it parsed its share of
    #: files, or the file left something behind that cannot be undone).
    leaving: str | None = None
