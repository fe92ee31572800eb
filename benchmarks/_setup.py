"""Set-up shared by the benchmarks: settings for one measuring process, and its database."""

from __future__ import annotations

from pathlib import Path


def install_settings(home: Path, values: dict[str, str]):
    """Resolve and install settings with ``values`` over the defaults, quiet logging, and
    a freshly reset database; the snapshot."""
    from spawnflow.bootstrap import logs, settings
    from spawnflow.models import schema

    overrides = [settings.Override(k, v, "benchmark") for k, v in values.items()]
    snapshot = settings.resolve(environ={"SPAWNFLOW_HOME": str(home)}, overrides=overrides)
    settings.install(snapshot)
    logs.configure("benchmark", console=True, console_level="WARNING")
    schema.reset()
    return snapshot
