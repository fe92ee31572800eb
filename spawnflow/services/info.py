"""What ``spawnflow info`` reports: versions, platform, start methods, paths, database."""

from __future__ import annotations

import platform as stdlib_platform
import sys

from spawnflow import __version__
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import startmethods
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.settings_table import COMPONENTS


def _masked(url: str) -> str:
    from spawnflow.bootstrap import orm

    return orm.masked(url)


def describe(
    settings: Settings, platform: platforms.Platform | None = None
) -> list[tuple[str, str]]:
    """(label, value) rows describing this installation."""
    platform = platform or platforms.current()
    default = startmethods.default(platform)
    methods = ", ".join(
        f"{m} (default)" if m == default else m for m in startmethods.available(platform)
    )
    rows = [
        ("spawnflow", __version__),
        (
            "Python",
            f"{stdlib_platform.python_version()} ({sys.implementation.name}) {sys.executable}",
        ),
        ("OS", f"{platform.display_name} ({stdlib_platform.platform()})"),
        ("Start methods", methods),
    ]
    core, source = startmethods.for_component(settings, None)
    rows.append(("Start method [core]", f"{core} (from {source})"))
    for component in COMPONENTS:
        method, source = startmethods.for_component(settings, component)
        via = "[core]" if settings.value(component, "mp_start_method") is None else str(source)
        roles = [r for r, c in startmethods.ROLE_COMPONENTS.items() if c == component]
        rows.append((f"Start method [{component}]",
                     f"{method} (from {via}) for {', '.join(roles)}"))  # fmt: skip
    locations = settings.locations
    exists = "exists" if locations.config_file.exists() else "not found"
    rows += [
        ("Config file", f"{locations.config_file} ({exists}; from {locations.config_file_origin})"),
        ("Home", str(locations.home) if locations.home else "(SPAWNFLOW_HOME not set)"),
        ("Data directory", str(locations.data_dir)),
        ("Log directory", str(settings.logging.base_log_folder)),
        (
            "Dags folder",
            str(settings.core.dags_folder)
            + (
                ""
                if settings.core.dags_folder.is_dir()
                else " (not there yet: the first standalone or dag-processor makes it)"
            ),
        ),
        ("Database", _masked(settings.database.url)),
    ]
    return rows
