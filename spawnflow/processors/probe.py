"""Targets of the doctor's probe children: each reports what it sees of itself.

``spawnflow doctor`` launches :func:`doctor_probe` under every start method. The probe
looks at its own settings, logging and database state and sends a
:class:`~spawnflow.comms.ProbeReport`; then it waits to be stopped, with a grandchild
running, so that the doctor can check that stopping it stops the whole tree.
"""

from __future__ import annotations

import logging
import os
import sys

from spawnflow.bootstrap import launcher, lifecycle, logs, settings
from spawnflow.comms import Channel, ProbeReport

#: Modules whose presence in a child tells how heavy its start-up was.
WATCHED_MODULES = ("sqlalchemy", "alembic", "click", "psutil")


def wait_for_stop(channel: Channel) -> None:
    """Do nothing until asked to stop."""
    # Short timeouts let a simulated signal (Windows control pipe) run its handler.
    while not lifecycle.stop_requested.wait(0.5):
        pass


def doctor_probe(
    channel: Channel,
    *,
    nonce: str,
    method: str,
    database_url: str | None,
    grandchild: bool = True,
) -> None:
    """Report this child's view of itself to the doctor, then wait to be stopped."""
    # Logged at exactly the file's level, so that the event passes whatever it is.
    level = logging.getLevelName(settings.current().logging.level)
    logs.get_logger("spawnflow.doctor").log(level, "doctor probe", nonce=nonce)
    inherited_engines, own_connection, inherited_use = 0, "no database", "nothing inherited"
    if database_url is not None:
        inherited_engines, own_connection, inherited_use = _probe_database(database_url)
    grandchild_pid = 0
    if grandchild:
        spec = launcher.ChildSpec("doctor-probe", "spawnflow.processors.probe:wait_for_stop")
        launched = launcher.launch(spec, method=method)
        launched.wait_ready()
        grandchild_pid = launched.pid
    channel.send(
        ProbeReport(
            pid=os.getpid(),
            role=logs.current_role(),
            log_file=str(logs.current_log_file()),
            settings=settings.current().as_plain(),
            inherited_engines=inherited_engines,
            own_connection=own_connection,
            inherited_use=inherited_use,
            grandchild_pid=grandchild_pid,
            modules=[name for name in WATCHED_MODULES if name in sys.modules],
        )
    )
    wait_for_stop(channel)


def _probe_database(url: str) -> tuple[int, str, str]:
    from spawnflow.bootstrap import orm

    inherited_engines = orm.engines_of_other_processes()
    try:
        with orm.engine(url).connect() as connection:
            own = orm.server_connection_id(connection)
    except Exception as error:  # noqa: BLE001 - reported to the doctor as the check's detail
        own = f"error: {error}"
    # A fork child inherits the doctor's module state, including the session it
    # holds open on purpose; spawn and forkserver children inherit nothing.
    doctor = sys.modules.get("spawnflow.services.doctor")
    held = getattr(doctor, "held_session", None)
    if held is None:
        return inherited_engines, own, "nothing inherited"
    from sqlalchemy import text

    try:
        held.execute(text("SELECT 1"))
    except orm.ForeignConnectionError:
        return inherited_engines, own, "refused"
    except Exception as error:  # noqa: BLE001
        return inherited_engines, own, f"failed without the guard: {error}"
    return inherited_engines, own, "used (the guard did not refuse it)"
