"""The platform module: OS descriptions and the process-tree operations it guards."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from spawnflow.bootstrap import platform as platforms
from tests.oskit import simulation


def test_each_os_offers_its_start_methods_and_default():
    assert platforms.LINUX.start_methods == ("fork", "forkserver", "spawn")
    assert platforms.LINUX.default_start_method == "forkserver"
    assert platforms.MACOS.default_start_method == "spawn"
    assert platforms.WINDOWS.start_methods == ("spawn",)
    assert not platforms.WINDOWS.process_groups
    assert not platforms.WINDOWS.stop_by_signal


def test_detect_matches_this_machine():
    expected = {"win32": "windows", "darwin": "darwin"}.get(sys.platform, "linux")
    assert platforms.detect().name == expected
    assert platforms.by_name(expected) is platforms.detect()
    with pytest.raises(ValueError, match="unknown platform"):
        platforms.by_name("beos")


GRANDPARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print(child.pid, flush=True)
child.wait()
"""


TREE_PATHS = [platforms.WINDOWS]
if platforms.current().process_groups:
    TREE_PATHS.insert(0, platforms.LINUX)


@pytest.mark.parametrize("platform", TREE_PATHS, ids=lambda platform: platform.name)
def test_kill_tree_kills_a_process_and_its_descendants(platform):
    # The Windows path walks the tree with psutil only; the POSIX path also freezes
    # the tree and kills by process group. Both run here.
    root = subprocess.Popen([sys.executable, "-c", GRANDPARENT], stdout=subprocess.PIPE, text=True)
    try:
        grandchild_pid = int(root.stdout.readline())  # the grandchild exists from here on
        tree = platform.snapshot_tree(platform.handle(root.pid))
        assert [p.pid for p in tree] == [root.pid, grandchild_pid]

        platform.kill_tree(tree)

        assert root.wait(timeout=30) != 0
        grandchild = tree[1]
        assert not grandchild.is_running() or grandchild.status() == psutil.STATUS_ZOMBIE
    finally:
        if root.poll() is None:
            root.kill()
        root.stdout.close()


#: A chain of three processes, each leading its own process group, as a worker and
#: its task do below a scheduler. Each ignores SIGHUP (as under ``nohup``) and leaves a
#: mark if it ever runs again after being stopped; each prints the pids from itself down.
CHAIN = """
import os, signal, subprocess, sys, time
from pathlib import Path

marks, depth = Path(sys.argv[1]), int(sys.argv[2])
signal.signal(signal.SIGHUP, signal.SIG_IGN)
signal.signal(signal.SIGCONT, lambda *_: (marks / f"continued-{depth}").touch())
below = ""
if depth < 2:
    child = subprocess.Popen([sys.executable, __file__, sys.argv[1], str(depth + 1)],
                             process_group=0, stdout=subprocess.PIPE, text=True)
    below = child.stdout.readline()
print(os.getpid(), below, flush=True)
time.sleep(300)
"""


@pytest.mark.skipif(not platforms.current().process_groups, reason="process groups are POSIX")
def test_kill_tree_kills_children_before_their_parents_so_none_wakes(tmp_path, monkeypatch):
    # A parent's death sends SIGHUP and SIGCONT to each stopped process group of its
    # children that it orphans: killed parent first, a stopped worker would run again
    # and see its task die. Children first, every one has its SIGKILL before any wakes.
    script, marks = tmp_path / "chain.py", tmp_path / "marks"
    script.write_text(CHAIN)
    marks.mkdir()
    root = subprocess.Popen([sys.executable, str(script), str(marks), "0"],
                            process_group=0, stdout=subprocess.PIPE, text=True)  # fmt: skip
    signalled: list[tuple[str, int]] = []
    tree: list[psutil.Process] = []
    real_kill, real_killpg = psutil.Process.kill, os.killpg

    def kill(process: psutil.Process) -> None:
        signalled.append(("process", process.pid))
        real_kill(process)

    def killpg(pgid: int, signum: int) -> None:
        signalled.append(("group", pgid))
        real_killpg(pgid, signum)

    try:
        pids = [int(pid) for pid in root.stdout.readline().split()]
        assert len(pids) == 3  # root, middle, leaf: each runs, in its own group
        tree = platforms.LINUX.snapshot_tree(platforms.LINUX.handle(root.pid))
        monkeypatch.setattr(psutil.Process, "kill", kill)
        monkeypatch.setattr(os, "killpg", killpg)

        platforms.LINUX.kill_tree(tree)

        assert root.wait(timeout=30) == -9
        leaf, middle = pids[2], pids[1]
        assert signalled == [
            ("group", leaf), ("process", leaf), ("group", middle), ("process", middle),
            ("group", root.pid), ("process", root.pid),
        ]  # fmt: skip
        assert not list(marks.iterdir())  # none ran again once stopped
    finally:
        monkeypatch.undo()
        # psutil handles know their process: a pid taken by a stranger is left alone.
        platforms.LINUX.kill_tree(tree or platforms.LINUX.snapshot_tree(_handle(root.pid)))
        root.wait(timeout=30)
        root.stdout.close()


def _handle(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def test_signal_names_come_from_negative_exit_codes():
    assert platforms.LINUX.signal_name(-9) == "SIGKILL"
    assert platforms.LINUX.signal_name(0) is None
    assert platforms.LINUX.signal_name(None) is None


@pytest.mark.skipif(
    simulation() is not None, reason="a simulated Windows or macOS has no counter to read"
)
def test_peak_rss_grows_with_memory_this_process_touches():
    before = platforms.peak_rss_bytes()
    # Enough to pass the old peak (this worker may have been bigger before) by 64 MiB.
    headroom = max(before - psutil.Process().memory_info().rss, 0)
    touched = b"x" * (headroom + 64 * 2**20)
    assert platforms.peak_rss_bytes() - before >= 48 * 2**20
    del touched


def sleeper(*, own_group: bool = False) -> subprocess.Popen:
    code = "import os, sys, time\n"
    if own_group:
        code += "os.setpgid(0, 0)\n"
    code += "print(os.getpid(), flush=True)\ntime.sleep(300)\n"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    process.stdout.readline()  # it runs, and leads its group if asked to
    return process


@pytest.mark.skipif(not platforms.current().process_groups, reason="process groups are POSIX")
def test_kill_group_leaves_a_stranger_that_took_the_leaders_pid_alone():
    stranger, former_leader = sleeper(own_group=True), sleeper()
    try:
        # As if ``former_leader`` had led group ``stranger.pid`` and exited, and the
        # stranger then took that pid and made a group of its own.
        platforms.LINUX.kill_group(stranger.pid, psutil.Process(former_leader.pid))
        assert stranger.poll() is None
        platforms.LINUX.kill_group(stranger.pid, psutil.Process(stranger.pid))
        assert stranger.wait(timeout=30) == -9
    finally:
        for process in (stranger, former_leader):
            process.kill()
            process.wait()
            process.stdout.close()


def test_a_handle_on_an_exited_process_has_no_tree():
    process = sleeper()
    handle = psutil.Process(process.pid)
    process.kill()
    process.wait()
    process.stdout.close()
    assert platforms.current().has_exited(handle)
    assert platforms.current().snapshot_tree(handle) == []


def test_peak_rss_never_imports_a_resource_module_from_a_dags_folder(tmp_path, monkeypatch):
    # Windows has no standard resource module: `import resource` there finds a helper of
    # that name in the Dags folder, which the parser puts on sys.path (at the end).
    (tmp_path / "resource.py").write_text("raise RuntimeError('the Dags folder was imported')\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "resource", raising=False)

    peak = platforms.peak_rss_bytes()

    assert peak is None or peak > 0
    imported = sys.modules.get("resource")
    assert imported is None or not str(imported.__file__).startswith(str(tmp_path))


JOB_HOLDER = """
import subprocess, sys, time
from spawnflow.bootstrap import platform as platforms
assert platforms.WINDOWS.contain_tree(), "Windows refused the job object"
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print(sleeper.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.skipif(
    sys.platform != "win32", reason="job objects exist on Windows only; no simulation has them"
)
def test_a_kill_on_close_job_takes_what_its_holder_started_down_with_it():
    from tests.process.test_stop import gone

    holder = subprocess.Popen([sys.executable, "-c", JOB_HOLDER], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        sleeper = int(holder.stdout.readline())
        psutil.Process(holder.pid).kill()  # the job's only handle closes with it
        holder.wait(timeout=30)
        assert gone(sleeper), "the job did not kill what its holder started"
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.stdout.close()
