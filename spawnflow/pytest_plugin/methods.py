"""Which start methods the plugin runs a test under."""

from __future__ import annotations

import pytest


def parse(spelling: str, source: str) -> list[str]:
    """``all``, ``default`` or ``fork,spawn``: the methods, in this OS's order; a method
    this OS does not have is a usage error naming ``source``."""
    from spawnflow.bootstrap import startmethods

    offered = list(startmethods.available())
    words = [w.strip().lower() for w in spelling.split(",") if w.strip()]
    if not words or words == ["default"]:
        return [startmethods.default()]
    if words == ["all"]:
        return offered
    unknown = [w for w in words if w not in offered]
    if unknown:
        raise pytest.UsageError(
            f"{source} names {', '.join(unknown)}, which this OS does not have; it has "
            f"{', '.join(offered)} (or: all, default)"
        )
    return [m for m in offered if m in words]
