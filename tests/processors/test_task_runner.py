"""Commands of CommandTasks: stoppable while they are silent, any output decoded."""

from __future__ import annotations

import sys

import psutil
import pytest

from spawnflow.bootstrap.launcher import ChildSpec, launch
from spawnflow.processors.task_runner import TaskFailed, run_command
from tests.process.test_orphans import wait_for
from tests.process.test_stop import gone

pytestmark = pytest.mark.process
PYTHON = f'"{sys.executable}"'


def test_a_task_waiting_on_a_silent_command_stops_warm_and_ends_the_command(
    start_method, make_settings
):
    # Windows cannot interrupt a blocking read of the command's pipe: the task process
    # must wait for the command where a warm stop reaches it.
    make_settings()
    child = launch(ChildSpec("task", "tests.fixtures.targets:run_a_silent_command"),
                   method=start_method)  # fmt: skip
    child.wait_ready()
    child.channel.recv(timeout=60)
    task = psutil.Process(child.pid)
    assert wait_for(lambda: task.children(recursive=True)), "the command never started"
    command = task.children(recursive=True)[0].pid

    status = child.stop(grace=60)

    assert (status.cold, status.exitcode) == (False, 0), status.describe()
    assert gone(command), "the command outlived its task"


def test_output_in_another_encoding_is_decoded_not_fatal(capsys):
    # 'café' in Windows-1252, as a Windows program writes it to a pipe: not UTF-8.
    code = "import sys; sys.stdout.buffer.write(bytes([99, 97, 102, 233, 10]))"

    last = run_command(f'{PYTHON} -c "{code}"')

    assert last in ("caf\u00e9", "caf\ufffd")  # Windows-1252 locale, or replaced
    assert capsys.readouterr().out.startswith("caf")


def test_the_last_line_is_the_result_and_a_failure_names_the_exit_code():
    assert run_command(f'{PYTHON} -c "print(1); print(); print(2)"') == "2"
    with pytest.raises(TaskFailed, match="the command exited with code 3"):
        run_command(f'{PYTHON} -c "raise SystemExit(3)"')
