"""Making a folder or file read-only for a test, for every user the suite runs as.

Permission bits stop an ordinary user; root ignores them, so as root (a container, a
CI runner) the path is bind-mounted read-only onto itself, as a read-only volume
would be. Where neither works (root without the right to mount, Windows), the test
is skipped with the reason.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` (a folder with all it holds, or a file) cannot be written meanwhile."""
    if sys.platform == "win32":
        pytest.skip("a read-only folder for its owner needs ACLs on Windows")
    if os.geteuid() != 0:
        with _without_write_bits(path):
            yield
        return
    done = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"root cannot bind-mount here: {done.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        yield
    finally:
        # Lazily: a process that still has a file open there does not keep it mounted.
        subprocess.run(["umount", "-l", str(path)], check=True)


@contextmanager
def _without_write_bits(path: Path) -> Iterator[None]:
    paths = [path, *path.rglob("*")] if path.is_dir() else [path]
    modes = {p: p.stat().st_mode for p in paths}
    write = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    try:
        for p in paths:
            p.chmod(modes[p] & ~write)
        yield
    finally:
        for p in reversed(paths):
            p.chmod(stat.S_IMODE(modes[p]))
