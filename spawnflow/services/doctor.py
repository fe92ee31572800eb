"""``spawnflow doctor``: launch probe children under each start method and check them.

For every start method this machine has, the doctor holds a database session open
(with a connection checked out, as a long-running parent would), launches a probe
child that itself starts a grandchild, and checks:

* settings: the child's snapshot equals the parent's;
* logging: the child configured logging for its role and its event reached its log file;
* no inherited engine: the child holds no engine of another process, opened its own
  server connection, and (under fork) was refused when it used the parent's session;
* parent pool: the parent's connection is the same server connection as before and works;
* tree stopped: stopping the child left neither it nor its grandchild running.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spawnflow.bootstrap import launcher, orm, startmethods
from spawnflow.bootstrap.settings import Settings
from spawnflow.comms import ProbeReport

CHECKS = ("settings", "logging", "no inherited engine", "parent pool", "tree stopped")

#: The session the doctor holds open while a probe runs. A fork child inherits this
#: module's state and tries to use it; the ORM guard must refuse.
held_session: Any = None


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class MethodReport:
    """The outcome of every check under one start method."""

    method: str
    ready_ms: float | None = None
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return len(self.checks) == len(CHECKS) and all(c.ok for c in self.checks)

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)


def run(
    settings: Settings, methods: list[str] | None = None, grace: float = 5.0
) -> list[MethodReport]:
    """Run every check under each of ``methods`` (default: all this machine has)."""
    return [_run_one(settings, method, grace) for method in methods or startmethods.available()]


def _run_one(settings: Settings, method: str, grace: float) -> MethodReport:
    global held_session
    report = MethodReport(method)
    url = settings.database.url
    parent_connection, database_error = None, None
    try:
        orm.check_reachable(url, create=True)
        held_session = orm.sessionmaker_for(url)()
        parent_connection = orm.server_connection_id(held_session.connection())
    except orm.DatabaseUnavailable as error:
        database_error = str(error)

    nonce = uuid.uuid4().hex
    spec = launcher.ChildSpec(
        "doctor-probe",
        "spawnflow.processors.probe:doctor_probe",
        {"nonce": nonce, "method": method, "database_url": None if database_error else url},
        settings=settings,
    )
    child = launcher.launch(spec, method=method)
    try:
        child.wait_ready()
        assert child.ready_seconds is not None  # set by wait_ready() along with child.ready
        report.ready_ms = child.ready_seconds * 1000
        probe = child.channel.recv(timeout=120)
        if not isinstance(probe, ProbeReport):
            raise RuntimeError(f"the probe sent {type(probe).__name__} instead of its report")
    except Exception as error:  # noqa: BLE001 - every failure becomes a failed check
        child.stop(grace)
        _close_held()
        report.checks = [Check(name, False, f"probe failed: {error}") for name in CHECKS]
        return report

    report.checks.append(_check_settings(settings, probe))
    report.checks.append(_check_logging(probe, nonce, child.pid))
    report.checks.append(
        _check_no_inherited_engine(method, probe, parent_connection, database_error)
    )
    tree = _check_tree_stopped(child, probe, grace)
    # Checked after the child is gone: its exit must not have touched our connection either.
    report.checks.append(_check_parent_pool(parent_connection, database_error))
    report.checks.append(tree)
    return report


def _close_held() -> None:
    global held_session
    if held_session is not None:
        held_session.close()
        held_session = None


def _check_settings(settings: Settings, probe: ProbeReport) -> Check:
    expected = settings.as_plain()
    if probe.settings == expected:
        return Check("settings", True, f"{sum(len(v) for v in expected.values())} values equal")
    differing = sorted(
        f"{section}.{key}"
        for section, values in expected.items()
        for key, value in values.items()
        if probe.settings.get(section, {}).get(key) != value
    )
    return Check("settings", False, "differs: " + ", ".join(differing))


def _check_logging(probe: ProbeReport, nonce: str, pid: int) -> Check:
    if probe.role != "doctor-probe":
        return Check("logging", False, f"child logs as role {probe.role!r}")
    path = Path(probe.log_file)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        return Check("logging", False, f"cannot read {path}: {error.strerror}")
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("nonce") == nonce:
            if event.get("pid") == pid and event.get("role") == "doctor-probe":
                return Check("logging", True, f"event in {path.name}")
            return Check(
                "logging", False, f"event has pid {event.get('pid')}, role {event.get('role')}"
            )
    return Check("logging", False, f"the probe's event is not in {path}")


def _check_no_inherited_engine(
    method: str, probe: ProbeReport, parent_connection: str | None, database_error: str | None
) -> Check:
    name = "no inherited engine"
    if database_error:
        return Check(name, False, database_error)
    if probe.inherited_engines:
        return Check(name, False, f"child holds {probe.inherited_engines} inherited engine(s)")
    if probe.own_connection.startswith("error") or probe.own_connection == parent_connection:
        return Check(name, False, f"child connection: {probe.own_connection}")
    expected = "refused" if method == "fork" else "nothing inherited"
    if probe.inherited_use != expected:
        return Check(name, False, f"inherited session: {probe.inherited_use}")
    return Check(name, True, f"own connection; inherited session {probe.inherited_use}")


def _check_parent_pool(parent_connection: str | None, database_error: str | None) -> Check:
    name = "parent pool"
    if database_error or held_session is None:
        return Check(name, False, database_error or "no session")
    try:
        after = orm.server_connection_id(held_session.connection())
    except Exception as error:  # noqa: BLE001 - a broken parent connection is the finding
        _close_held()
        return Check(name, False, f"parent connection broken: {error}")
    _close_held()
    if after != parent_connection:
        return Check(name, False, f"connection changed from {parent_connection} to {after}")
    return Check(name, True, "same server connection, still works")


def _check_tree_stopped(child: launcher.Child, probe: ProbeReport, grace: float) -> Check:
    import psutil

    status = child.stop(grace)
    survivors = []
    for pid in (child.pid, probe.grandchild_pid):
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                survivors.append(pid)
        except psutil.NoSuchProcess:
            pass
    if survivors:
        return Check("tree stopped", False, f"still running: {survivors}")
    how = "cold" if status.cold else "warm"
    return Check("tree stopped", not status.cold, f"{how} stop, child {status.describe()}")
