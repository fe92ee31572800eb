"""How XCom values are written down: JSON, plus a few common types JSON lacks.

Datetimes, dates, times, timedeltas, decimals, UUIDs, bytes, sets and tuples are
stored as small tagged objects and come back as themselves. Anything else cannot
be stored, and pushing it fails the task with a message naming the key and type.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

TAG = "__spawnflow__"
SUPPORTED = (
    "None, bool, int, float, str, list, dict with str keys, tuple, set, bytes, datetime, "
    "date, time, timedelta, Decimal, UUID"
)


class XComError(ValueError):
    """A value that cannot be stored as an XCom, or a stored one that cannot be read."""


def encode(value: Any, key: str = "return_value", task_id: str = "?", *,
           subject: str | None = None) -> str:  # fmt: skip
    """The JSON text of ``value``; XComError naming the key, task and type if impossible
    (``subject`` names the value otherwise: "state 'job_id'", say)."""
    try:
        return msgspec.json.encode(_plain(value)).decode()
    except _Unsupported as unsupported:
        what = subject or f"XCom {key!r} of task {task_id!r}"
        kept = "stored" if subject else "stored as an XCom"
        raise XComError(
            f"{what} is {unsupported.what}, which cannot be {kept}; supported: {SUPPORTED}"
        ) from None


def decode(text: str) -> Any:
    """The value :func:`encode` wrote."""
    try:
        return _typed(msgspec.json.decode(text))
    except (msgspec.DecodeError, KeyError, ValueError) as error:
        raise XComError(f"a stored XCom cannot be read: {error}") from None


class _Unsupported(Exception):
    def __init__(self, what: str):
        self.what = what


def _plain(value: Any, path: str = "") -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [_plain(item, f"{path}[{n}]") for n, item in enumerate(value)]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise _Unsupported(f"a dict with non-string keys{_at(path)}")
        if TAG in value:
            raise _Unsupported(f"a dict with the reserved key {TAG!r}{_at(path)}")
        return {key: _plain(item, f"{path}[{key!r}]") for key, item in value.items()}
    if isinstance(value, tuple):
        return {TAG: "tuple", "v": [_plain(item, path) for item in value]}
    if isinstance(value, set | frozenset):
        return {TAG: "set", "v": [_plain(item, path) for item in value]}
    if isinstance(value, dt.datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, dt.date):
        return {TAG: "date", "v": value.isoformat()}
    if isinstance(value, dt.time):
        return {TAG: "time", "v": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {TAG: "timedelta", "v": value.total_seconds()}
    if isinstance(value, decimal.Decimal):
        return {TAG: "decimal", "v": str(value)}
    if isinstance(value, uuid.UUID):
        return {TAG: "uuid", "v": str(value)}
    if isinstance(value, bytes | bytearray):
        return {TAG: "bytes", "v": base64.b64encode(bytes(value)).decode()}
    kind = type(value)
    raise _Unsupported(f"a {kind.__module__}.{kind.__qualname__}{_at(path)}")


def _at(path: str) -> str:
    return f" (at {path})" if path else ""


# Each reader takes the stored "v" (a str, float or list, by tag) and returns the value.
_READERS: dict[str, Callable[[Any], Any]] = {
    "tuple": lambda v: tuple(_typed(item) for item in v),
    "set": lambda v: {_typed(item) for item in v},
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
    "timedelta": lambda v: dt.timedelta(seconds=v),
    "decimal": decimal.Decimal,
    "uuid": uuid.UUID,
    "bytes": base64.b64decode,
}


def _typed(value: Any) -> Any:
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if isinstance(value, dict):
        if TAG in value:
            return _READERS[value[TAG]](value["v"])
        return {key: _typed(item) for key, item in value.items()}
    return value
