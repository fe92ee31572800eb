"""A Dag for the compose example: two tasks, each on whichever worker takes it."""

import datetime as dt
import socket

from spawnflow import Dag, task

with Dag("hello", schedule=None, start_date=dt.datetime(2026, 1, 1)):

    @task
    def where() -> str:
        return socket.gethostname()

    @task
    def say(host: str) -> None:
        print(f"the first task ran on {host}, this one on {socket.gethostname()}")

    say(where())
