"""A terminal's (or console's) Ctrl-C that reaches a child while it boots, before it
leads a group of its own, does not end it: its parent decides what a Ctrl-C means."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spawnflow.bootstrap import platform as platforms
from tests.oskit import press_ctrl_c, start_in_console

pytestmark = pytest.mark.process

# Run as a script. Under spawn and forkserver the child's spec holds its boot, before
# it leads a group of its own, until the test pressed Ctrl-C (BootHold).
SCRIPT = """
import signal, sys, time
if __name__ == "__main__":
    from tests.fixtures.targets import BootHold
    from spawnflow.bootstrap import settings
    from spawnflow.bootstrap.launcher import ChildSpec, launch
    interrupts = []
    signal.signal(signal.SIGINT, lambda *_: interrupts.append(1))  # the top-level command's
    settings.install(settings.resolve())
    held = {{"held_until": BootHold({pressed!r})}}
    child = launch(ChildSpec("test-child", "tests.fixtures.targets:wait_quietly", held),
                   method={method!r})
    print("launched", child.pid, flush=True)
    child.wait_ready(timeout=120)
    print("ready; interrupts seen by the parent:", len(interrupts), flush=True)
    child.stop(grace=5)
"""


def test_a_ctrl_c_while_a_child_boots_does_not_end_it(start_method, tmp_path, home):
    pressed = tmp_path / "pressed"
    script = tmp_path / "launch_one.py"
    script.write_text(SCRIPT.format(pressed=str(pressed), method=start_method))
    process = start_in_console(
        [sys.executable, str(script)], cwd=Path(__file__).parents[2],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None  # a pipe, as asked
        assert process.stdout.readline().startswith("launched")
        press_ctrl_c(process)
        pressed.write_text("")
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert out.splitlines()[-1] == "ready; interrupts seen by the parent: 1"
    assert "Traceback" not in err


# Run as a script, in a terminal (console) of its own: a launch that starts
# multiprocessing's resource tracker, which spawn and a forkserver's start need first,
# with a Ctrl-C from the script itself (no timing involved) either "while it starts"
# (pending as the tracker starts) or "as it boots" (pressed on the console right after
# the tracker's exec: a new interpreter's boot takes far longer than that).
TRACKER_SCRIPT = """
import os, signal
if __name__ == "__main__":
    import psutil
    from multiprocessing import resource_tracker
    from spawnflow.bootstrap import settings
    from spawnflow.bootstrap.launcher import ChildSpec, launch
    from tests.oskit import ctrl_c_on_console
    interrupts, started = [], []
    signal.signal(signal.SIGINT, lambda *_: interrupts.append(1))  # the top-level command's
    tracker = resource_tracker._resource_tracker
    starts = tracker.ensure_running

    def pressed():
        new = tracker._fd is None
        if new and {press!r} == "while it starts":
            os.kill(os.getpid(), signal.SIGINT)
        starts()
        if new:
            started.append(psutil.Process(tracker._pid))
            if {press!r} == "as it boots":
                ctrl_c_on_console(os.getpid())

    resource_tracker.ensure_running = tracker.ensure_running = pressed
    settings.install(settings.resolve())
    child = launch(ChildSpec("test-child", "tests.fixtures.targets:wait_quietly"),
                   method={method!r})
    child.wait_ready(timeout=120)
    (tracker_process,) = started
    try:
        runs = tracker_process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        runs = False
    print("interrupts seen by the parent:", len(interrupts), flush=True)
    print("the tracker runs:", runs, flush=True)
    child.stop(grace=5)
"""


def run_tracker_script(tmp_path: Path, method: str, press: str) -> tuple[list[str], str]:
    """:data:`TRACKER_SCRIPT`'s lines on stdout, and its stderr; it exited with 0."""
    if method == "fork":
        pytest.skip("a fork launch starts no interpreter and needs no resource tracker")
    if sys.platform == "win32":
        pytest.skip("Windows has no resource tracker")
    script = tmp_path / "launch_one.py"
    script.write_text(TRACKER_SCRIPT.format(method=method, press=press))
    process = start_in_console(
        [sys.executable, str(script)], cwd=Path(__file__).parents[2],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    return out.splitlines(), err


def test_a_ctrl_c_while_a_launch_starts_the_resource_tracker_reaches_the_parent(
    start_method, tmp_path, home
):
    """The standard library starts its resource tracker with SIGINT blocked and then
    unblocks it: inside the launch's window, where SIGINT is ignored, that discarded a
    Ctrl-C pressed meanwhile (a triggerer that never stopped)."""
    if not platforms.current().process_groups:
        pytest.skip("the Windows simulation's Ctrl-C goes to the console, not to a process")
    lines, err = run_tracker_script(tmp_path, start_method, "while it starts")
    assert lines[-2:] == ["interrupts seen by the parent: 1", "the tracker runs: True"], err


def test_a_ctrl_c_while_the_resource_tracker_boots_ends_no_process(start_method, tmp_path, home):
    """The tracker a launch starts is a process of the terminal's group (of the console,
    under the Windows simulation), so it must boot deaf to Ctrl-C as every child does.
    Under the Windows simulation the standard library cannot block SIGINT while it
    starts one: started outside the launch's window, it died of a KeyboardInterrupt
    while importing ``site`` (seen: a triggerer's Ctrl-C that printed a fatal error)."""
    lines, err = run_tracker_script(tmp_path, start_method, "as it boots")
    assert lines[-1] == "the tracker runs: True", err
    assert "Traceback" not in err, err
