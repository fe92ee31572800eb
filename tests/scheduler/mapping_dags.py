"""Dags with mapped tasks for the end-to-end tests (tests/scheduler/test_mapping_e2e.py):
expand over a literal list, over an upstream output, partial + expand, expand_kwargs, an
empty list, a value that is not a list, and a bound on running instances."""

from __future__ import annotations

import json
from pathlib import Path

TEXT = """
import datetime as dt
import json
import os
import time
from pathlib import Path

from spawnflow import Dag, task

MARKS = Path({marks!r})
START = dt.datetime(2026, 1, 1)  # @daily, no catch-up: one run is due


@task
def numbers():
    return [1, 2, 3]


@task
def seven():
    return 7


@task
def add(x, y):
    return x + y


@task
def pair(a, b):
    return f"{{a}}{{b}}"


@task
def collect(values, name):
    (MARKS / (name + ".json")).write_text(json.dumps(values))
    return values


@task(max_active_tis_per_dag=2)
def bounded(n):
    # Start and end marks: each instance counts those started and not ended when it
    # starts, itself included, and the test checks the largest count.
    (MARKS / f"start-{{n}}").write_text(str(os.getpid()))
    running = {{p.name[6:] for p in MARKS.glob("start-*")}} - {{
        p.name[4:] for p in MARKS.glob("end-*")
    }}
    (MARKS / f"seen-{{n}}").write_text(str(len(running)))
    time.sleep(0.3)  # holds its place, so that others would overlap if they could
    (MARKS / f"end-{{n}}").write_text("")
    return n


with Dag("e2e_mapping", schedule="@daily", start_date=START):
    collect(add.expand(x=[1, 2, 3], y=[10, 20]), "literal")
    collect(add.partial(y=100).expand(x=numbers()), "upstream")
    collect(pair.expand_kwargs([{{"a": "x", "b": 1}}, {{"a": "y", "b": 2}}]), "kwargs")
    add.expand(x=[], y=[1])
    bounded.expand(n=list(range(6)))


with Dag("e2e_map_not_a_list", schedule="@daily", start_date=START):
    add.partial(y=1).expand(x=seven())


with Dag("e2e_map_hundred", schedule="@daily", start_date=START):
    collect(add.partial(y=1).expand(x=list(range(100))), "hundred")
"""

STATES = {
    "e2e_mapping": {
        "numbers": ["success"],
        "add": ["success"] * 6,
        "add__1": ["success"] * 3,
        "add__2": ["skipped"],
        "pair": ["success"] * 2,
        "bounded": ["success"] * 6,
        "collect": ["success"],
        "collect__1": ["success"],
        "collect__2": ["success"],
    },
    "e2e_map_not_a_list": {"seven": ["success"], "add": ["failed"]},
}
NOT_A_LIST = "expand() argument 'x' must be a list, but the output of task 'seven' is int 7"


def write(folder: Path, marks: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    marks.mkdir(parents=True, exist_ok=True)
    path = folder / "mapping_dags.py"
    path.write_text(TEXT.format(marks=str(marks)), encoding="utf-8")
    return path


def collected(marks: Path, name: str) -> object:
    return json.loads((marks / f"{name}.json").read_text())


def most_running(marks: Path) -> int:
    """The largest number of ``bounded`` instances one of them saw running."""
    return max(int(path.read_text()) for path in marks.glob("seen-*"))
