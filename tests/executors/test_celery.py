"""The Celery executor with real brokers (Redis, RabbitMQ) and real ``spawnflow celery
worker`` processes, each with a home of its own (two machines), under each start method
of the workers' supervisors (issue 17)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import MetaData, create_engine, text

from spawnflow.executors.celery_executor import CeleryExecutor
from tests.conftest import _server_database, backends_under_test, required_backends
from tests.oskit import start_in_console

pytest.importorskip("celery", reason="the Celery executor needs spawnflow[celery]")

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(sys.platform == "win32", reason="the test's Dags run POSIX shell commands"),
]

BROKERS = {
    "redis": os.environ.get("SPAWNFLOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "rabbitmq": os.environ.get(
        "SPAWNFLOW_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//"
    ),
}
FAN_OUT = 30

DAGS = """
import datetime as dt
import os

from spawnflow import CommandTask, Dag

MARK = 'touch "$MARKS/{task}.$SPAWNFLOW_TEST_WORKER.$$"'

with Dag("fan", schedule=None, start_date=dt.datetime(2026, 1, 1)):
    for n in range(int(os.environ["FAN_OUT"])):
        CommandTask(f"t{n}", MARK.format(task=f"t{n}"))
    for n in range(2):
        CommandTask(f"special{n}", MARK.format(task=f"special{n}"),
                    queue=os.environ["SPECIAL_QUEUE"])

with Dag("single", schedule=None, start_date=dt.datetime(2026, 1, 1)):
    CommandTask("once", MARK.format(task="once"))

with Dag("slow", schedule=None, start_date=dt.datetime(2026, 1, 1)):
    CommandTask("sleeps", "sleep 120", execution_timeout=dt.timedelta(seconds=2))

with Dag("gated", schedule=None, start_date=dt.datetime(2026, 1, 1),
         default_args={"retries": 1, "retry_delay": dt.timedelta(seconds=0)}):
    CommandTask("waits", 'touch "$MARKS/started.$SPAWNFLOW_TEST_WORKER.$$"; '
                'while [ ! -e "$MARKS/open" ]; do sleep 0.1; done; '
                'touch "$MARKS/waits.$SPAWNFLOW_TEST_WORKER.$$"')

with Dag("gated_fan", schedule=None, start_date=dt.datetime(2026, 1, 1)):
    for n in range(6):
        CommandTask(f"g{n}", f'touch "$MARKS/began-g{n}.$SPAWNFLOW_TEST_WORKER.$$"; '
                    'while [ ! -e "$MARKS/open" ]; do sleep 0.1; done; '
                    f'touch "$MARKS/g{n}.$SPAWNFLOW_TEST_WORKER.$$"')
"""


class TwiceExecutor(CeleryExecutor):
    """Sends every workload twice, as an at-least-once broker may deliver it."""

    def queue(self, workload):
        super().queue(workload)
        super().queue(workload)


class LateExecutor(CeleryExecutor):
    """Holds back each task instance's first message and sends it right after the
    second, as a message a broker lost for a while and delivered after all."""

    def __init__(self, settings, **kwargs):
        super().__init__(settings, **kwargs)
        self.held: dict[int, object] = {}

    def queue(self, workload):
        first = self.held.setdefault(workload.ti_id, workload)
        if first is workload:
            self.sent[workload.ti_id] = workload  # it left, as far as the scheduler knows
            return
        super().queue(workload)
        if first is not None:
            self.held[workload.ti_id] = None
            super().queue(first)


class LosingExecutor(CeleryExecutor):
    """Every message is lost on its way to the broker."""

    def queue(self, workload):
        self.sent[workload.ti_id] = workload


def _reachable(url: str) -> str | None:
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1, timeout=3)
    except Exception as error:  # the transport's own errors
        return f"{type(error).__name__}: {error}"
    return None


@pytest.fixture(params=["redis"])
def broker(request) -> str:
    """The broker (each test runs on Redis; the fan-out on RabbitMQ too)."""
    url = BROKERS[request.param]
    why = _reachable(url)
    if why is not None:
        reason = f"{request.param} at {url} is unavailable: {why}"
        if request.param in required_backends():
            pytest.fail(reason)
        pytest.skip(reason)
    return url


every_broker = pytest.mark.parametrize("broker", list(BROKERS), indirect=True)


@pytest.fixture
def metadata_url(tmp_path: Path, worker_id: str, testrun_uid: str) -> str:
    """The metadata database the scheduler and the workers share: PostgreSQL where the
    run tests it, else a SQLite file (one machine's stand-in)."""
    if "postgres" in backends_under_test():
        url = _server_database("postgres", f"spawnflow_test_{testrun_uid[:10]}_{worker_id}")
        # Emptied (the site migrates it): this worker's earlier tests ran the same Dags.
        engine = create_engine(url)
        try:
            tables = MetaData()
            tables.reflect(engine)
            tables.drop_all(engine)
        finally:
            engine.dispose()
        return url
    return f"sqlite:///{(tmp_path / 'shared.db').as_posix()}"


class Site:
    """A scheduler's machine and its workers' machines, on one broker and one database."""

    def __init__(self, tmp_path: Path, method: str, broker: str, database: str) -> None:
        self.tmp_path = tmp_path
        self.dags = tmp_path / "dags"
        self.dags.mkdir()
        (self.dags / "celery_dags.py").write_text(DAGS)
        self.marks = tmp_path / "marks"
        self.marks.mkdir()
        self.tag = uuid.uuid4().hex[:10]
        self.queue = f"spawnflow-{self.tag}"
        self.special = f"{self.queue}-special"
        self.common = {
            "SPAWNFLOW__DATABASE__URL": database,
            "SPAWNFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "SPAWNFLOW__CORE__LOAD_EXAMPLES": "false",
            "SPAWNFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "false",
            "SPAWNFLOW__CORE__EXECUTOR": "celery",
            "SPAWNFLOW__CORE__MP_START_METHOD": method,
            "SPAWNFLOW__CORE__STOP_GRACE_PERIOD": "5",
            "SPAWNFLOW__CELERY__BROKER_URL": broker,
            "SPAWNFLOW__CELERY__DEFAULT_QUEUE": self.queue,
            "SPAWNFLOW__EXECUTOR__PARALLELISM": "4",
            "SPAWNFLOW__EXECUTOR__HEARTBEAT_INTERVAL": "0.2",
            "SPAWNFLOW__SCHEDULER__LOOP_INTERVAL": "0.1",
            "SPAWNFLOW__SCHEDULER__TASK_HEARTBEAT_TIMEOUT": "5",
            "MARKS": str(self.marks),
            "FAN_OUT": str(FAN_OUT),
            "SPECIAL_QUEUE": self.special,
        }
        self.workers: list[subprocess.Popen] = []

    def env(self, machine: str, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
        env.update(self.common, SPAWNFLOW_HOME=str(self.tmp_path / machine),
                   SPAWNFLOW_TEST_WORKER=machine, **extra)  # fmt: skip
        return env

    def spawnflow(self, *args: str, machine: str = "scheduler", **extra: str):
        return subprocess.run([sys.executable, "-m", "spawnflow", *args], capture_output=True,
                              text=True, env=self.env(machine, **extra), timeout=300)  # fmt: skip

    def start_worker(self, machine: str, queues: str, **extra: str) -> subprocess.Popen:
        log = self.tmp_path / machine / "logs" / "celery-worker.log"
        output = (self.tmp_path / f"{machine}.out").open("w")
        worker = start_in_console(
            [sys.executable, "-m", "spawnflow", "celery", "worker", "-q", queues, "-c", "2",
             "-n", self.hostname(machine)],
            env=self.env(machine, **extra), stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
        output.close()
        self.workers.append(worker)
        what = f"{machine} ready (its output: {self.tmp_path / f'{machine}.out'})"
        wait_for(lambda: log.exists() and " ready." in log.read_text(), what, worker)
        return worker

    def hostname(self, machine: str) -> str:
        """The Celery name of ``machine``'s worker: unique per test, since a broker
        refuses two workers of one name (RabbitMQ locks each name's control queue)."""
        return f"{machine}-{self.tag}@{socket.gethostname()}"

    def run(self, dag_id: str, **extra: str) -> None:
        """Parse, trigger ``dag_id`` and schedule until nothing is left to do."""
        assert self.spawnflow("dag-processor", "--once").returncode == 0
        triggered = self.spawnflow("dags", "trigger", dag_id)
        assert triggered.returncode == 0, triggered.stderr
        done = self.spawnflow("scheduler", "--exit-when-idle", **extra)
        assert done.returncode == 0, done.stderr[-3000:]

    def marks_of(self, prefix: str) -> list[tuple[str, str]]:
        """(task, worker) of every mark whose task starts with ``prefix``."""
        found = [p.name.split(".") for p in self.marks.iterdir() if p.name.startswith(prefix)]
        return sorted((task, worker) for task, worker, _ in found)

    def stop_workers(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def wait_for(condition, what: str, process: subprocess.Popen | None = None,
             timeout: float = 120) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    while not condition():
        assert process is None or process.poll() is None, f"{what}: it exited first"
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)  # polling files another process writes


def states(url: str, dag_id: str) -> dict[str, tuple[str, int]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT task_id, state, try_number FROM task_instance WHERE dag_id = :d"
            ), {"d": dag_id})  # fmt: skip
            return {task: (state, tries) for task, state, tries in rows}
    finally:
        engine.dispose()


@pytest.fixture
def site(tmp_path, start_method, broker, metadata_url):
    made = Site(tmp_path, start_method, broker, metadata_url)
    migrated = made.spawnflow("db", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    try:
        yield made
    finally:
        made.stop_workers()


@every_broker
def test_two_workers_run_a_fan_out_once_each_and_queues_route(site, metadata_url):
    site.start_worker("machine-a", site.queue)
    site.start_worker("machine-b", f"{site.queue},{site.special}")

    site.run("fan")

    ran = site.marks_of("t")
    assert sorted(task for task, _ in ran) == sorted(f"t{n}" for n in range(FAN_OUT))  # once each
    assert site.marks_of("special") == [("special0", "machine-b"), ("special1", "machine-b")]
    assert set(states(metadata_url, "fan").values()) == {("success", 1)}
    status = site.spawnflow("celery", "status")
    assert status.returncode == 0, status.stderr
    assert {line.split()[0] for line in status.stdout.splitlines()[2:]} >= {
        site.hostname("machine-a"), site.hostname("machine-b")
    }  # fmt: skip


def test_a_message_delivered_twice_runs_its_try_once(site, metadata_url):
    site.start_worker("machine-a", site.queue)
    site.start_worker("machine-b", f"{site.queue},{site.special}")

    site.run("fan", SPAWNFLOW__CORE__EXECUTOR=f"{__name__}:TwiceExecutor")

    assert sorted(task for task, _ in site.marks_of("t")) == sorted(f"t{n}" for n in range(FAN_OUT))
    assert len(site.marks_of("special")) == 2
    assert set(states(metadata_url, "fan").values()) == {("success", 1)}


STUCK_IN_QUEUED = {"SPAWNFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "3",
                   "SPAWNFLOW__SCHEDULER__NUM_STUCK_IN_QUEUED_RETRIES": "2"}  # fmt: skip


def test_a_lost_message_is_queued_again_and_its_late_copy_runs_nothing_twice(site, metadata_url):
    site.start_worker("machine-a", site.queue)

    site.run("single", SPAWNFLOW__CORE__EXECUTOR=f"{__name__}:LateExecutor", **STUCK_IN_QUEUED)

    assert states(metadata_url, "single") == {"once": ("success", 1)}
    assert site.marks_of("once") == [("once", "machine-a")]  # one run of two messages
    assert worker_received(site, "machine-a") == 2
    assert "task queued again" in _scheduler_log(site)


def test_a_task_whose_messages_are_all_lost_fails_saying_why(site, metadata_url):
    site.start_worker("machine-a", site.queue)

    site.run("single", SPAWNFLOW__CORE__EXECUTOR=f"{__name__}:LosingExecutor", **STUCK_IN_QUEUED)

    assert states(metadata_url, "single") == {"once": ("failed", 0)}
    reason = _reason(metadata_url, "single", "once")
    assert "task_queued_timeout" in reason
    assert "num_stuck_in_queued_retries = 2" in reason
    assert _scheduler_log(site).count("task queued again") == 2
    assert site.marks_of("once") == []


def test_a_workers_try_log_stays_on_its_machine_and_is_read_from_remote_storage(
    site, metadata_url, tmp_path
):
    """The worker's machine has a home of its own: it writes the try's log under its own
    logs folder, copies it to [logging] remote_base_url, and `spawnflow tasks logs` on
    the scheduler's machine, which has no local file, reads the copy."""
    from spawnflow.processors.scheduler.queueing import attempt_log_key

    remote = tmp_path / "remote"
    site.common["SPAWNFLOW__LOGGING__REMOTE_BASE_URL"] = remote.as_uri()
    site.start_worker("machine-a", site.queue)

    site.run("single")

    assert states(metadata_url, "single") == {"once": ("success", 1)}
    key = attempt_log_key("single", _run_id(metadata_url, "single"), "once", 1).split("/")
    on_worker = tmp_path.joinpath("machine-a", "logs", *key)
    assert "task finished" in on_worker.read_text(encoding="utf-8")
    assert not tmp_path.joinpath("scheduler", "logs", *key).exists()
    assert remote.joinpath(*key).read_bytes() == on_worker.read_bytes()
    shown = site.spawnflow("tasks", "logs", "single", "latest", "once")
    assert shown.returncode == 0, shown.stderr
    assert "reading the copy at" in shown.stderr
    assert "task finished" in shown.stdout


def _run_id(url: str, dag_id: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(
                text("SELECT run_id FROM dag_run WHERE dag_id = :d"), {"d": dag_id}
            ).scalar_one()
    finally:
        engine.dispose()


def _reason(url: str, dag_id: str, task_id: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(text(
                "SELECT reason FROM task_instance WHERE dag_id = :d AND task_id = :t"
            ), {"d": dag_id, "t": task_id}).scalar_one()  # fmt: skip
    finally:
        engine.dispose()


def test_execution_timeout_is_enforced_on_a_celery_worker(site, metadata_url):
    site.start_worker("machine-a", site.queue)

    site.run("slow")

    state, tries = states(metadata_url, "slow")["sleeps"]
    assert (state, tries) == ("failed", 1)


def test_a_task_whose_worker_is_killed_runs_again_on_the_other(site, metadata_url):
    first = site.start_worker("machine-a", site.queue)
    scheduler = _start_scheduler(site, "gated")
    wait_for(lambda: site.marks_of("started"), "the first try started", scheduler)
    _kill_tree(first)
    (site.marks / "open").write_text("")
    site.start_worker("machine-b", site.queue)

    _finish(scheduler)
    assert states(metadata_url, "gated")["waits"] == ("success", 2)
    assert [worker for _, worker in site.marks_of("waits")] == ["machine-b"]


def _start_scheduler(site: Site, dag_id: str) -> subprocess.Popen:
    assert site.spawnflow("dag-processor", "--once").returncode == 0
    assert site.spawnflow("dags", "trigger", dag_id).returncode == 0
    return start_in_console(
        [sys.executable, "-m", "spawnflow", "scheduler", "--exit-when-idle"],
        env=site.env("scheduler"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish(scheduler: subprocess.Popen) -> str:
    try:
        _, stderr = scheduler.communicate(timeout=300)
    finally:
        if scheduler.poll() is None:
            scheduler.kill()
            scheduler.wait()
    assert scheduler.returncode == 0, stderr[-3000:]
    return stderr


def _said(site: Site, machine: str, text: str) -> bool:
    return text in (site.tmp_path / f"{machine}.out").read_text()


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_a_warm_stop_lets_the_running_try_finish(site, metadata_url, how):
    from tests.oskit import POSIX, press_ctrl_c

    if how == "sigterm" and not POSIX:
        pytest.skip("a Windows process gets no SIGTERM from another: os.kill terminates it")
    worker = site.start_worker("machine-a", site.queue)
    scheduler = _start_scheduler(site, "gated")
    wait_for(lambda: site.marks_of("started"), "the try started", scheduler)

    if how == "sigterm":
        worker.send_signal(signal.SIGTERM)
    else:
        press_ctrl_c(worker)  # on a Windows console, every process of the tree gets it
    wait_for(lambda: _said(site, "machine-a", "Warm shutdown"), "the warm stop began", worker)
    (site.marks / "open").write_text("")

    assert worker.wait(timeout=120) == 0  # a warm stop that let its tries end
    _finish(scheduler)
    assert states(metadata_url, "gated")["waits"] == ("success", 1)
    assert [machine for _, machine in site.marks_of("waits")] == ["machine-a"]


def test_a_second_ctrl_c_stops_the_worker_and_its_task_at_once(site, metadata_url):
    from tests.oskit import press_ctrl_c

    worker = site.start_worker("machine-a", site.queue)
    scheduler = _start_scheduler(site, "gated")
    wait_for(lambda: site.marks_of("started"), "the try started", scheduler)

    press_ctrl_c(worker)
    wait_for(lambda: _said(site, "machine-a", "Warm shutdown"), "the warm stop began", worker)
    press_ctrl_c(worker)
    worker.wait(timeout=120)  # with the gate shut, only a cold stop ends it
    site.start_worker("machine-b", site.queue)
    (site.marks / "open").write_text("")

    _finish(scheduler)
    # The try that the cold stop ended is retried elsewhere; its task process did not
    # outlive the worker (it would have left a mark of machine-a's once the gate opened).
    assert states(metadata_url, "gated")["waits"] == ("success", 2)
    assert [machine for _, machine in site.marks_of("waits")] == ["machine-b"]


def _kill_tree(process: subprocess.Popen) -> None:
    """The machine that ran ``process`` goes away: it and every process under it."""
    import psutil

    parent = psutil.Process(process.pid)
    for member in [parent, *parent.children(recursive=True)]:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass  # it went with its parent (a parent-death signal) before we got to it
    process.wait(timeout=60)


def _scheduler_log(site: Site) -> str:
    return (site.tmp_path / "scheduler" / "logs" / "scheduler.log").read_text()


def test_a_restarted_scheduler_adopts_what_celery_still_holds(site, metadata_url):
    """Two tries run on the worker and four wait in the broker when the scheduler's
    machine dies; the next scheduler takes them over instead of sending them again."""
    site.common["SPAWNFLOW__SCHEDULER__JOB_HEARTBEAT_TIMEOUT"] = "3"
    site.common["SPAWNFLOW__EXECUTOR__PARALLELISM"] = "8"
    site.start_worker("machine-a", site.queue)  # two at a time
    first = _start_scheduler(site, "gated_fan")
    wait_for(lambda: len(site.marks_of("began")) == 2, "two tries began", first)
    wait_for(lambda: {state for state, _ in states(metadata_url, "gated_fan").values()}
             == {"queued", "running"}, "all six sent", first)  # fmt: skip
    _kill_tree(first)

    second = start_in_console(
        [sys.executable, "-m", "spawnflow", "scheduler", "--exit-when-idle"],
        env=site.env("scheduler"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(lambda: "adopted task instances" in _scheduler_log(site), "adoption", second)
    (site.marks / "open").write_text("")
    _finish(second)

    assert set(states(metadata_url, "gated_fan").values()) == {("success", 1)}
    assert sorted(task for task, _ in site.marks_of("g")) == [f"g{n}" for n in range(6)]
    assert worker_received(site, "machine-a") == 6  # nothing sent twice
    assert "reset task instances" not in _scheduler_log(site)


def worker_received(site: Site, machine: str) -> int:
    """Messages ``machine``'s Celery worker received so far."""
    return (site.tmp_path / f"{machine}.out").read_text().count("] received")


class OwnRedis:
    """A Redis server of the test's own on a free port, which the test can stop and
    start again; it keeps its data in an append-only file, as a broker whose restart
    must lose nothing is configured."""

    def __init__(self, folder: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.folder = folder
        folder.mkdir()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        import redis

        self.process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.folder), "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=(self.folder / "server.out").open("a"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.exceptions.RedisError:
                return False

        wait_for(answers, f"redis-server on port {self.port}", self.process)
        client.close()

    def stop(self) -> None:
        assert self.process is not None
        self.process.terminate()  # Redis' shutdown: the append-only file is complete
        self.process.wait(timeout=60)


REDIS_SERVER = shutil.which("redis-server")


@pytest.fixture
def own_redis(tmp_path):
    if REDIS_SERVER is None:
        reason = "redis-server is not installed: the broker restart needs a server of its own"
        if "redis" in required_backends():
            pytest.fail(reason)
        pytest.skip(reason)
    server = OwnRedis(tmp_path / "redis")
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.stop()


def test_a_broker_restart_mid_run_loses_nothing(tmp_path, start_method, own_redis, metadata_url):
    """Two tries run and four wait in Redis when it stops; once it is back, every task
    runs exactly once."""
    site = Site(tmp_path, start_method, own_redis.url, metadata_url)
    site.common["SPAWNFLOW__EXECUTOR__PARALLELISM"] = "8"
    assert site.spawnflow("db", "migrate").returncode == 0
    try:
        site.start_worker("machine-a", site.queue)
        scheduler = _start_scheduler(site, "gated_fan")
        wait_for(lambda: len(site.marks_of("began")) == 2, "two tries began", scheduler)
        wait_for(lambda: {state for state, _ in states(metadata_url, "gated_fan").values()}
                 == {"queued", "running"}, "all six sent", scheduler)  # fmt: skip

        own_redis.stop()
        own_redis.start()
        (site.marks / "open").write_text("")
        _finish(scheduler)
    finally:
        site.stop_workers()

    assert set(states(metadata_url, "gated_fan").values()) == {("success", 1)}
    assert sorted(task for task, _ in site.marks_of("g")) == [f"g{n}" for n in range(6)]
