"""A triggerer rides out a database outage (issue 11's promise for every database user),
on PostgreSQL and MariaDB, under each start method: its trigger runner dies while the
database is away and another takes its place with the triggers the triggerer held, the
trigger fires, the event waits in the triggerer, and the task resumes once it is back."""

from __future__ import annotations

import psutil
import pytest
import sqlalchemy as sa

from spawnflow.comms.states import TaskState
from tests.conftest import SERVER_URLS
from tests.faults.proxy import TcpProxy
from tests.oskit import press_ctrl_c
from tests.scheduler import harness
from tests.scheduler.test_e2e import environment, start, wait_for
from tests.triggerer.harness import log_events, marks_of, task_instance, trigger_rows
from tests.triggerer.test_deferral import schedule_until, set_up

pytestmark = pytest.mark.process


def test_a_triggerer_rides_out_an_outage_and_its_event_resumes_the_task_once(
    start_method, make_settings, tmp_path, home, claims_db, claims_url
):
    settings, gates, marks = set_up(start_method, make_settings, tmp_path, claims_url)
    server = sa.make_url(SERVER_URLS[claims_db])
    with TcpProxy(server.host or "127.0.0.1", server.port or 0) as proxy:
        proxied = sa.make_url(claims_url).set(host="127.0.0.1", port=proxy.port)
        env = environment(home, start_method, proxied.render_as_string(hide_password=False),
                          tmp_path / "dags", SPAWNFLOW__CORE__LOAD_EXAMPLES="false",
                          SPAWNFLOW__TRIGGERER__POLL_INTERVAL="0.1")  # fmt: skip
        run_id = harness.trigger("waits_for_a_gate")
        triggerer = start("triggerer", env=env)
        log = home / "logs" / "triggerer.log"
        try:
            schedule_until(settings, {run_id}, lambda: bool(trigger_rows()) and all(
                row.triggerer_id for row in trigger_rows()))  # fmt: skip
            # Its runner starts once the triggerer read back what it claimed.
            wait_for(lambda: "trigger runner started" in events_of(log),
                     what="the trigger runner")  # fmt: skip
            proxy.cut()
            seen = "database out of reach; retrying"
            wait_for(lambda: seen in events_of(log), what="the triggerer seeing the outage")
            # Whether or not the first runner had the trigger yet, its successor, ready
            # only while the database is away, must get it from what the triggerer holds.
            (first,) = [
                e["runner_pid"] for e in log_events(log) if e["event"] == "trigger runner started"
            ]
            psutil.Process(first).kill()
            wait_for(lambda: events_of(log).count("trigger runner started") == 2,
                     what="a second trigger runner")  # fmt: skip
            (gates / "open").write_text("")  # fires while the database is away
            wait_for(lambda: "trigger fired" in events_of(home / "logs" / "trigger-runner.log"),
                     what="the trigger firing")  # fmt: skip
            proxy.restore()
            schedule_until(settings, {run_id}, lambda: harness.finished(run_id))
            assert triggerer.poll() is None  # it rode the outage out
            press_ctrl_c(triggerer)
            out, err = triggerer.communicate(timeout=120)
        finally:
            if triggerer.poll() is None:
                triggerer.kill()
    assert triggerer.returncode == 130, err
    assert "Traceback" not in out + err
    assert "database reachable again" in events_of(log)
    waits = task_instance(run_id, "waits")
    assert (waits.state, waits.try_number) == (TaskState.SUCCESS, 1), waits.reason
    assert len(marks_of(marks, "waits-resumed")) == 1


def events_of(path) -> list[str]:
    return [e.get("event") for e in log_events(path)]
