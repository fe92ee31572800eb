"""XCom values: JSON plus the common types JSON lacks, and a clear error for the rest."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest

from spawnflow.sdk import xcom


def test_common_types_round_trip():
    value = {
        "tuple": (1, "two"), "set": {3}, "when": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        "day": dt.date(2026, 1, 2), "time": dt.time(12, 30), "wait": dt.timedelta(seconds=90),
        "money": decimal.Decimal("1.10"), "id": uuid.UUID(int=7), "raw": b"\x00\xff",
        "nested": [{"deep": (None, True, 1.5)}],
    }  # fmt: skip
    assert xcom.decode(xcom.encode(value)) == value


def test_a_value_that_cannot_be_stored_names_the_key_task_and_type():
    with pytest.raises(xcom.XComError) as raised:
        xcom.encode({"rows": [1, object()]}, "return_value", "extract")
    assert str(raised.value).startswith(
        "XCom 'return_value' of task 'extract' is a builtins.object (at ['rows'][1]), which "
        "cannot be stored as an XCom; supported:"
    )


def test_non_string_keys_are_refused():
    with pytest.raises(xcom.XComError, match="a dict with non-string keys"):
        xcom.encode({1: "one"}, "k", "t")
