"""What ``spawnflow info`` reports: versions, platform, start methods, paths, database."""

from __future__ import annotations

import platform as stdlib_platform
import sys
from typing import Any

from spawnflow import __version__
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import startmethods
from spawnflow.bootstrap.settings import Settings
from spawnflow.bootstrap.settings_table import COMPONENTS


def _masked(url: str) -> str:
    from spawnflow.bootstrap import orm

    return orm.masked(url)


def facts(settings: Settings, platform: platforms.Platform | None = None) -> dict[str, Any]:
    """This installation as one object, typed (what ``info --output json`` prints)."""
    platform = platform or platforms.current()
    core, core_source = startmethods.for_component(settings, None)
    components: dict[str, dict[str, Any]] = {
        "core": {"start_method": core, "source": str(core_source)}
    }
    for component in COMPONENTS:
        method, source = startmethods.for_component(settings, component)
        via = "[core]" if settings.value(component, "mp_start_method") is None else str(source)
        roles = [r for r, c in startmethods.ROLE_COMPONENTS.items() if c == component]
        components[component] = {"start_method": method, "source": via, "roles": roles}
    locations = settings.locations
    dags_folder = settings.core.dags_folder
    return {
        "spawnflow": __version__,
        "python": {
            "version": stdlib_platform.python_version(),
            "implementation": sys.implementation.name,
            "executable": sys.executable,
        },
        "os": {"name": platform.display_name, "platform": stdlib_platform.platform()},
        "start_methods": {
            "available": list(startmethods.available(platform)),
            "default": startmethods.default(platform),
        },
        "components": components,
        "config_file": {
            "path": str(locations.config_file),
            "exists": locations.config_file.exists(),
            "source": locations.config_file_origin,
        },
        "home": str(locations.home) if locations.home else None,
        "data_dir": str(locations.data_dir),
        "log_dir": str(settings.logging.base_log_folder),
        "dags_folder": {"path": str(dags_folder), "exists": dags_folder.is_dir()},
        "database": _masked(settings.database.url),
    }


def describe(found: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of :func:`facts` for people."""
    python, methods = found["python"], found["start_methods"]
    rows = [
        ("spawnflow", found["spawnflow"]),
        ("Python", f"{python['version']} ({python['implementation']}) {python['executable']}"),
        ("OS", f"{found['os']['name']} ({found['os']['platform']})"),
        ("Start methods", ", ".join(
            f"{m} (default)" if m == methods["default"] else m for m in methods["available"]
        )),
    ]  # fmt: skip
    for component, chosen in found["components"].items():
        text = f"{chosen['start_method']} (from {chosen['source']})"
        if "roles" in chosen:
            text += f" for {', '.join(chosen['roles'])}"
        rows.append((f"Start method [{component}]", text))
    config, dags = found["config_file"], found["dags_folder"]
    exists = "exists" if config["exists"] else "not found"
    missing = (
        "" if dags["exists"] else " (not there yet: the first standalone or dag-processor makes it)"
    )
    rows += [
        ("Config file", f"{config['path']} ({exists}; from {config['source']})"),
        ("Home", found["home"] or "(SPAWNFLOW_HOME not set)"),
        ("Data directory", found["data_dir"]),
        ("Log directory", found["log_dir"]),
        ("Dags folder", dags["path"] + missing),
        ("Database", found["database"]),
    ]
    return rows
