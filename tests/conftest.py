"""Fixtures shared by every test: start methods, isolated homes, database backends.

* ``start_method``: each process test runs under every start method this OS has, or
  only under the method ``SPAWNFLOW__CORE__MP_START_METHOD`` names (tox and nox set it
  per environment), or under the list ``SPAWNFLOW_TEST_START_METHODS`` names (it wins).
  The report header says which variable narrowed the matrix, so it never does so silently.
* A test that takes both runs every method on one backend and each other backend under
  one method (:data:`ANCHOR_BACKENDS`), unless ``SPAWNFLOW_TEST_FULL_MATRIX=1``.
* ``db_backend`` / ``database_url``: sqlite, postgres and mysql (MariaDB). Server
  backends get one database per pytest-xdist worker. ``SPAWNFLOW_TEST_BACKENDS``
  picks the backends; a server that is down skips its tests locally, and fails
  them when ``SPAWNFLOW_TEST_REQUIRE_BACKENDS`` names it (as CI does). Database
  names carry the test run's id as well, so that runs in parallel (``tox -p``)
  never share one; each run drops its databases when it ends.
* ``SPAWNFLOW_TEST_SIMULATE_OS=windows|macos`` with ``tests/simulate`` on
  ``PYTHONPATH`` runs everything as if on that OS, in every process (see
  ``tests/simulate/simulated_os.py``); the run refuses to start if the simulation
  did not load.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from spawnflow.bootstrap import launcher, lifecycle
from spawnflow.bootstrap import platform as platforms
from spawnflow.bootstrap import settings as settings_module
from spawnflow.bootstrap.settings import Override, Settings

#: pytester: the pytest plugin's tests run a user's test files in a pytest of their own.
pytest_plugins = ("pytester",)

#: Where a run's start methods come from, first found wins: the test run's own list
#: (comma-separated), then the product's setting, as tox sets it per environment.
METHOD_VARIABLES = ("SPAWNFLOW_TEST_START_METHODS", "SPAWNFLOW__CORE__MP_START_METHOD")
SIMULATION_VARIABLE = "SPAWNFLOW_TEST_SIMULATE_OS"
SERVER_URLS = {
    "postgres": os.environ.get(
        "SPAWNFLOW_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    ),
    "mysql": os.environ.get("SPAWNFLOW_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"),
}
BACKENDS = ("sqlite", "postgres", "mysql")


def method_choice() -> tuple[list[str], str | None]:
    """The start methods under test and the variable that chose them (None: all)."""
    for variable in METHOD_VARIABLES:
        chosen = [m.strip() for m in os.environ.get(variable, "").split(",") if m.strip()]
        if chosen:
            return chosen, variable
    return list(platforms.current().start_methods), None


def methods_under_test() -> list[str]:
    return method_choice()[0]


def simulated_os() -> str | None:
    """The OS this run simulates (``windows``, ``macos``), or None."""
    return os.environ.get(SIMULATION_VARIABLE) or None


def pytest_configure(config: pytest.Config) -> None:
    # Tests that use the pytest plugin (spawnflow_env) run under the same start methods
    # as the rest of the suite, unless the command line says otherwise.
    if config.getoption("spawnflow_start_methods", default="") is None:
        config.option.spawnflow_start_methods = ",".join(methods_under_test())
    simulated = simulated_os()
    if simulated:
        simulation = sys.modules.get("simulated_os")
        if simulation is None or simulation.active != simulated:
            raise pytest.UsageError(
                f"{SIMULATION_VARIABLE}={simulated} needs tests/simulate on PYTHONPATH, so that "
                "every process, children too, loads the simulation: "
                f"PYTHONPATH=tests/simulate {SIMULATION_VARIABLE}={simulated} python -m pytest"
            )
    offered = platforms.current().start_methods
    chosen, variable = method_choice()
    unknown = [m for m in chosen if m not in offered]
    if unknown:
        raise pytest.UsageError(
            f"{variable} names {', '.join(unknown)}, but "
            f"{platforms.current().display_name} offers {', '.join(offered)}"
        )


def pytest_report_header(config: pytest.Config) -> str:
    platform = platforms.current()
    simulated = f" (simulated {simulated_os()})" if simulated_os() else ""
    chosen, variable = method_choice()
    source = f"only these: {variable} names them" if variable else "all this OS has"
    backends = backends_under_test()
    pairs = ", ".join(
        f"{backend} under {method_for_backend(backend, backends) or 'each'}"
        for backend in [*backends, "redis", "rabbitmq"]
    )
    return (
        f"spawnflow platform: {platform.display_name}{simulated}; start methods under test: "
        f"{', '.join(chosen)} ({source}); a test of both runs {pairs}"
    )


def backends_under_test() -> list[str]:
    chosen = os.environ.get("SPAWNFLOW_TEST_BACKENDS")
    if not chosen:
        return list(BACKENDS)
    names = [name.strip() for name in chosen.split(",") if name.strip()]
    unknown = set(names) - set(BACKENDS)
    if unknown:
        raise pytest.UsageError(f"SPAWNFLOW_TEST_BACKENDS names unknown backends: {unknown}")
    return names


def required_backends() -> set[str]:
    return {n.strip() for n in os.environ.get("SPAWNFLOW_TEST_REQUIRE_BACKENDS", "").split(",")}


#: A test that takes a start method and a backend runs every method on the first of
#: these backends under test (Redis for the Celery brokers), and each other backend
#: under one method: MariaDB under fork (fork-safety against both servers), SQLite under
#: forkserver (Linux's default method with ``standalone``'s default database; spawn on
#: SQLite is what the Windows and macOS simulations run), RabbitMQ under spawn.
#: ``SPAWNFLOW_TEST_FULL_MATRIX=1`` runs every pair.
ANCHOR_BACKENDS = ("postgres", "mysql", "sqlite")
BACKEND_METHODS = {"postgres": "fork", "mysql": "fork", "sqlite": "forkserver", "rabbitmq": "spawn"}
#: The parameters that name a backend: ``db_backend``, the Celery tests' ``broker`` and
#: the fixtures of modules that choose their own backends.
BACKEND_PARAMETERS = (
    "db_backend",
    "deferral_db",
    "claims_db",
    "behind_a_proxy",
    "broker",
    "server",
)


def full_matrix() -> bool:
    return os.environ.get("SPAWNFLOW_TEST_FULL_MATRIX", "") not in ("", "0")


def method_for_backend(backend: str, backends: list[str]) -> str | None:
    """The one method a test of ``backend`` runs under, or None: every method."""
    methods = methods_under_test()
    anchor = next(name for name in ANCHOR_BACKENDS if name in backends)
    if full_matrix() or backend in (anchor, "redis"):
        return None
    method = BACKEND_METHODS.get(backend)  # none for a parameter left empty (NOTSET)
    if method is None:
        return None
    return method if method in methods else methods[0]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "start_method" in metafunc.fixturenames:
        metafunc.parametrize("start_method", methods_under_test())
    if "db_backend" in metafunc.fixturenames:
        metafunc.parametrize("db_backend", backends_under_test())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the (method, backend) pairs outside the matrix (:data:`ANCHOR_BACKENDS`)."""
    backends = backends_under_test()
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        method = params.get("start_method")
        backend = next((params[name] for name in BACKEND_PARAMETERS if name in params), None)
        only = method_for_backend(backend, backends) if method and backend else None
        (dropped if only is not None and method != only else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


# -- isolation ------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Every test gets its own SPAWNFLOW_HOME, no SPAWNFLOW__ variables, no settings."""
    home = tmp_path / "home"
    monkeypatch.setenv("SPAWNFLOW_HOME", str(home))
    monkeypatch.delenv("SPAWNFLOW_CONFIG", raising=False)
    for variable in list(os.environ):
        if variable.upper().startswith("SPAWNFLOW__"):
            monkeypatch.delenv(variable)
    monkeypatch.setattr(settings_module, "_installed", None)
    # Commands run in process (click's runner) install spawnflow's stop handling.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(lifecycle, "_deferred", False)
    yield home
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    leftovers = launcher.children()
    for child in leftovers:
        child.stop(grace=5)
    _dispose_engines()
    assert not leftovers, f"the test left children running: {leftovers}"


def _dispose_engines() -> None:
    import sys

    orm = sys.modules.get("spawnflow.bootstrap.orm")
    if orm is not None:
        orm.dispose_all()


@pytest.fixture
def home(_isolated: Path) -> Path:
    """This test's SPAWNFLOW_HOME."""
    return _isolated


@pytest.fixture
def make_settings(home: Path) -> Callable[..., Settings]:
    """Resolve and install settings for this test: ``make_settings(**{"core.x": "y"})``."""

    def make(**values: object) -> Settings:
        overrides = [Override(name, str(value), "test") for name, value in values.items()]
        snapshot = settings_module.resolve(
            environ={"SPAWNFLOW_HOME": str(home)}, overrides=overrides
        )
        settings_module.install(snapshot)
        return snapshot

    return make


# -- databases ------------------------------------------------------------------------

_worker_databases: dict[str, str | Exception] = {}


def _admin(backend: str, *statements: str) -> None:
    admin = sa.create_engine(
        SERVER_URLS[backend], isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5}
    )
    try:
        with admin.connect() as connection:
            for statement in statements:
                connection.execute(sa.text(statement))
    finally:
        admin.dispose()


def _quoted(backend: str, name: str) -> str:
    return f'"{name}"' if backend == "postgres" else f"`{name}`"


def _drop(backend: str, name: str) -> str:
    force = " WITH (FORCE)" if backend == "postgres" else ""
    return f"DROP DATABASE IF EXISTS {_quoted(backend, name)}{force}"


@pytest.fixture(scope="session", autouse=True)
def _drop_worker_databases() -> Iterator[None]:
    yield
    for backend, found in _worker_databases.items():
        if isinstance(found, str):
            _admin(backend, _drop(backend, sa.make_url(found).database))


def _server_database(backend: str, name: str) -> str:
    """The URL of this worker's own database on ``backend``'s server, created once."""
    if backend not in _worker_databases:
        try:
            _admin(backend, _drop(backend, name), f"CREATE DATABASE {_quoted(backend, name)}")
            url = sa.make_url(SERVER_URLS[backend]).set(database=name)
            _worker_databases[backend] = url.render_as_string(hide_password=False)
        except sa.exc.OperationalError as error:
            _worker_databases[backend] = error
    found = _worker_databases[backend]
    if isinstance(found, Exception):
        reason = f"{backend} server at {SERVER_URLS[backend]} is unavailable: {found.orig}"
        if backend in required_backends():
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@pytest.fixture
def database_url(db_backend: str, tmp_path: Path, worker_id: str, testrun_uid: str) -> str:
    """The URL of a database on ``db_backend`` that no other test run or worker uses."""
    if db_backend == "sqlite":
        return f"sqlite:///{(tmp_path / 'spawnflow.db').as_posix()}"
    return _server_database(db_backend, f"spawnflow_test_{testrun_uid[:10]}_{worker_id}")


@pytest.fixture
def migrated_database(database_url: str, make_settings: Callable[..., Settings]) -> Settings:
    """Settings pointing at ``database_url``, whose schema was reset to the newest revision."""
    from spawnflow.models import schema

    snapshot = make_settings(**{"database.url": database_url})
    schema.reset(database_url)
    return snapshot


@pytest.fixture
def empty_database_url(database_url: str) -> str:
    """``database_url`` with no tables: other tests on this worker may have migrated it."""
    if not database_url.startswith("sqlite"):
        engine = sa.create_engine(database_url)
        try:
            metadata = sa.MetaData()
            metadata.reflect(engine)
            metadata.drop_all(engine)
        finally:
            engine.dispose()
    return database_url
