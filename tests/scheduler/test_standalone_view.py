"""``standalone`` on a terminal shows the live status view, read by its scheduler child
and sent over the wire (its own process keeps SQLAlchemy out), under each start method
(issue 15). The terminal is a pseudo-terminal; the view is read as plain text."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import pytest

from tests.scheduler.test_e2e import environment
from tests.scheduler.test_standalone_outcome import DAGS

pty = pytest.importorskip("pty", reason="a pseudo-terminal needs a POSIX system")

pytestmark = pytest.mark.process

#: Colours, cursor movement and the other control sequences a live view writes.
CONTROL = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07]*\x07)|\r")


def run_in_terminal(args: list[str], env: dict[str, str], timeout: float = 300) -> tuple[int, str]:
    """Run ``args`` with a pseudo-terminal as stdout; its exit code and what it wrote."""
    main, secondary = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:  # EIO: every end of the terminal is closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        with subprocess.Popen(args, env=env, stdout=secondary, stderr=subprocess.PIPE) as process:
            os.close(secondary)
            _, stderr = process.communicate(timeout=timeout)
        reader.join(timeout=60)
    finally:
        os.close(main)
    output = CONTROL.sub("", b"".join(chunks).decode("utf-8", errors="replace"))
    assert "Traceback" not in stderr.decode(), stderr.decode()
    return process.returncode, output


def test_standalone_on_a_terminal_shows_the_live_view_to_the_end(start_method, home, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "two_dags.py").write_text(DAGS)
    url = f"sqlite:///{(tmp_path / 'standalone.db').as_posix()}"
    env = environment(home, start_method, url, dags, SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                      COLUMNS="160", LINES="60", TERM="xterm-256color")  # fmt: skip
    env.pop("NO_COLOR", None)

    code, output = run_in_terminal(
        [sys.executable, "-m", "spawnflow", "standalone", "--exit-when-idle"], env
    )

    assert code == 1, output  # the failing Dag's run failed
    # The view's last frame (the live display leaves it on the screen), then the summary.
    last = [line.rstrip() for line in output[output.rindex("spawnflow status at") :].splitlines()]
    assert last[1:4] == [
        "dag-processor: 2 Dag(s), 0 import error(s)",
        "scheduler: 0 active run(s), 0 task(s) running, 0 deferred; runs 1 succeeded, 1 failed",
        "triggerer: 0 trigger(s) running",
    ]
    grid = [line.split() for line in last]
    assert ["breaks", "x"] in grid
    assert ["works", "+"] in grid
    assert "Nothing queued, running or deferred." in last
    # Each component's row (how late each is depends on how busy the machine is).
    components = last[last.index("Components") + 2 : -1]
    assert [line.split()[0] for line in components] == ["dag-processor", "scheduler", "triggerer"]
    assert last[-1] == "Done: every due Dag run has finished: 1 succeeded, 1 failed."
