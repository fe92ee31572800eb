"""Set-up shared by the benchmarks: settings for one measuring process, and its database."""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path


def as_installed() -> None:
    """Run spawnflow as an installation does, with its bytecode compiled and read.

    A machine that sets ``PYTHONDONTWRITEBYTECODE`` (this one does) with an editable
    install would otherwise make every spawned child compile spawnflow's sources again,
    a cost no user pays (pip compiles what it installs). The package is compiled once,
    now, and the variable dropped for the processes this one starts; a spawned child
    still gets ``-B`` from the interpreter's flags, which stops it writing bytecode,
    not reading it.
    """
    import compileall
    import os

    import spawnflow

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    compileall.compile_dir(Path(spawnflow.__file__).parent, quiet=1)


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


def start_s3() -> tuple[subprocess.Popen, str]:
    """moto's S3 server on a free loopback port, in a process of its own; a bucket."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="bench", aws_secret_access_key="bench")  # fmt: skip
    ends = time.monotonic() + 60
    while True:
        try:
            client.create_bucket(Bucket="bench")
            return server, endpoint
        except Exception:  # not listening yet
            if time.monotonic() > ends:
                server.kill()
                raise
            time.sleep(0.2)


def summary(values: list[float]) -> tuple[float, float]:
    """The median and the p95 of ``values``."""
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95
