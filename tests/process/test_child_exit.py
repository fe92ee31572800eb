"""How a launcher child ends, under each start method: with its own exit code, its
output flushed, and without the interpreter's teardown (issue 14's cheap children).

multiprocessing ends fork and forkserver children with ``os._exit``; a spawned child
ends the same way (``startmethods.SpawnedChild``) after running its atexit hooks,
instead of tearing down every module and object one by one, which cost a spawned task
process a fifth of its CPU and an executor worker 150 ms.
"""

from __future__ import annotations

from multiprocessing.connection import wait

import pytest

from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap.launcher import ChildSpec, launch

pytestmark = pytest.mark.process


def _output_of(child) -> bytes:
    received, streams = b"", [child.stdout]
    while streams:
        for ready in wait(streams, timeout=60):
            data = platforms.current().read_output(ready)
            if data:
                received += data
            else:
                streams.remove(ready)
    return received


@pytest.mark.parametrize("code", [0, 3])
def test_a_child_ends_with_its_code_and_output_without_a_teardown(
    code, start_method, make_settings, tmp_path
):
    make_settings()
    marks = tmp_path / "marks"
    spec = ChildSpec("test-exit", "tests.fixtures.targets:exit_after_hooks",
                     {"marks": str(marks), "code": code}, capture_output=True)  # fmt: skip
    child = launch(spec, method=start_method)
    child.wait_ready()
    output = _output_of(child)
    assert child.join(timeout=60).exitcode == code
    noted = marks.read_text().splitlines() if marks.exists() else []
    # No object still alive at the end is torn down, under any method.
    assert "torn down" not in noted
    if start_method == "spawn":
        # A spawned child runs its atexit hooks, as a Python program does, and what they
        # print reaches its parent. (multiprocessing skips them in fork and forkserver
        # children: those would run the parent's hooks too.)
        assert noted == ["atexit hook ran"]
        assert output.decode().splitlines() == ["said at exit"]
