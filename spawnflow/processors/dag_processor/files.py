"""Which files in the Dags folder are Dag files, and what their contents hash to."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

IGNORE_FILE = ".spawnflowignore"


def list_dag_files(folder: Path) -> list[Path]:
    """The ``.py`` files under ``folder``, minus what ``.spawnflowignore`` files exclude.

    An ignore file uses gitignore syntax and applies to the folder it is in and all
    below it, like a ``.gitignore``. Hidden folders and ``__pycache__`` are skipped.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(set(_walk(folder.resolve(), [], set())))


def _walk(folder: Path, rules: list, visited: set[Path]) -> Iterator[Path]:
    # Symbolic links may point back up the tree: each real folder is walked once.
    if folder in visited:
        return
    visited.add(folder)
    ignore = folder / IGNORE_FILE
    if ignore.is_file():
        import pathspec

        lines = ignore.read_text(encoding="utf-8", errors="replace").splitlines()
        rules = [*rules, (folder, pathspec.GitIgnoreSpec.from_lines(lines))]
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        if _ignored(entry, rules):
            continue
        if entry.is_dir():
            yield from _walk(entry.resolve(), rules, visited)
        elif entry.suffix == ".py" and entry.is_file():
            yield entry.resolve()


def _ignored(entry: Path, rules: list) -> bool:
    for base, spec in rules:
        relative = entry.relative_to(base).as_posix()
        if spec.match_file(relative + ("/" if entry.is_dir() else "")):
            return True
    return False


def content_hash(path: Path) -> str | None:
    """sha256 of the file's bytes, or None if it cannot be read (deleted meanwhile)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
