"""spawnflow's pytest plugin: test your Dags through real task processes, under every
start method, with pytest-xdist. Loaded by the ``pytest11`` entry point when spawnflow
is installed; nothing happens unless a test asks for one of its fixtures.

* ``spawnflow_env``: a spawnflow of the test's own (home, Dags folder, a migrated
  database) with ``add_dag_file``, ``run_dag``, ``run_task`` and ``check_dag_file``
  (see :class:`~spawnflow.pytest_plugin.environment.SpawnflowEnv`).
* ``spawnflow_start_method``: the start method the test runs under. Tests that use it
  (``spawnflow_env`` does) run once per method ``--spawnflow-start-methods`` names
  (``all``, ``default`` or a list such as ``fork,spawn``), or the methods of a
  ``@pytest.mark.spawnflow_start_methods("spawn", ...)`` marker.
* ``spawnflow_no_leftover_processes``: fails a test that leaves a process running.

Databases: SQLite by default, migrated once per xdist worker and copied for each test
(``--spawnflow-reuse-db`` keeps that migrated copy between test sessions, in the
user's cache folder);
``--spawnflow-database-url`` uses a PostgreSQL or MariaDB server instead, one database
per xdist worker (emptied between tests, dropped at the end).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from spawnflow.pytest_plugin.environment import SpawnflowEnv

MARKER = "spawnflow_start_methods"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("spawnflow", "spawnflow: Dag tests under every start method")
    group.addoption("--spawnflow-start-methods", metavar="METHODS", default=None,
                    help="Start methods to run spawnflow tests under: all, default (this OS's "
                    "default), or a comma-separated list such as fork,spawn.")  # fmt: skip
    group.addoption("--spawnflow-database-url", metavar="URL", default=None,
                    help="A PostgreSQL or MariaDB server to test against (one database per "
                    "xdist worker, dropped at the end) instead of SQLite.")  # fmt: skip
    group.addoption("--spawnflow-reuse-db", action="store_true",
                    help="Keep the migrated SQLite database between test sessions.")  # fmt: skip
    parser.addini("spawnflow_start_methods", "Default of --spawnflow-start-methods.",
                  default="default")  # fmt: skip
    parser.addini("spawnflow_leftover_grace", "Seconds the processes a test started get to "
                  "end after it, before spawnflow_no_leftover_processes fails it.",
                  default="30")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*methods): run this test under these start methods ('all': every "
        "method this OS has), whatever --spawnflow-start-methods says.",
    )
    if config.getoption("spawnflow_start_methods") is not None:
        _chosen(config)  # a method this OS lacks stops the run before it collects


def _chosen(config: pytest.Config) -> list[str]:
    """The methods of ``--spawnflow-start-methods``, else of the ini file."""
    from spawnflow.pytest_plugin import methods

    option = config.getoption("spawnflow_start_methods")
    if option is not None:
        return methods.parse(option, "--spawnflow-start-methods")
    return methods.parse(config.getini("spawnflow_start_methods"), "spawnflow_start_methods")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spawnflow_start_method" not in metafunc.fixturenames:
        return
    from spawnflow.pytest_plugin import methods

    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is not None:
        chosen = methods.parse(",".join(marker.args) or "all", f"@pytest.mark.{MARKER}")
    else:
        chosen = _chosen(metafunc.config)
    metafunc.parametrize("spawnflow_start_method", chosen, ids=[f"sf-{m}" for m in chosen])


@pytest.fixture
def spawnflow_start_method(request: pytest.FixtureRequest) -> str:
    """The start method this test runs under (see the module's docstring)."""
    return request.param


@pytest.fixture(scope="session")
def _spawnflow_database(request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:  # fmt: skip
    from spawnflow.pytest_plugin import databases

    worker = getattr(request.config, "workerinput", {}).get("workerid", "main")
    url = request.config.getoption("spawnflow_database_url")
    if url:
        server = databases.ServerDatabase(url, worker)
        try:
            yield server
        finally:
            server.drop()
        return
    if request.config.getoption("spawnflow_reuse_db"):
        import platformdirs

        folder = platformdirs.user_cache_path("spawnflow") / "pytest"
        folder.mkdir(parents=True, exist_ok=True)
    else:
        folder = tmp_path_factory.mktemp("spawnflow-template")
    yield databases.SqliteTemplate(folder, worker)


@pytest.fixture
def spawnflow_env(spawnflow_start_method: str, _spawnflow_database, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[SpawnflowEnv]:  # fmt: skip
    """A spawnflow of this test's own under ``spawnflow_start_method``: its home,
    Dags folder and migrated database, and what runs Dags and tasks in it."""
    import os

    from spawnflow.bootstrap import launcher, orm
    from spawnflow.bootstrap import settings as settings_module
    from spawnflow.pytest_plugin.environment import SpawnflowEnv

    home = tmp_path / "spawnflow"
    # The test's settings come from here alone: not from the user's config file or
    # environment (a SPAWNFLOW__ variable would reach the children otherwise).
    monkeypatch.setenv("SPAWNFLOW_HOME", str(home))
    monkeypatch.delenv("SPAWNFLOW_CONFIG", raising=False)
    for variable in [v for v in os.environ if v.upper().startswith("SPAWNFLOW__")]:
        monkeypatch.delenv(variable)
    previous = settings_module.installed()
    environment = SpawnflowEnv(home, _spawnflow_database.url_for(home), spawnflow_start_method)
    try:
        yield environment
    finally:
        for child in launcher.children():
            child.stop(grace=5)
        orm.dispose_all()
        _spawnflow_database.clean()
        settings_module.restore(previous)


@pytest.fixture
def spawnflow_no_leftover_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if a process it started (a child, or a child's child) is still
    running once it ended (after ``spawnflow_leftover_grace`` seconds to end); the
    leftovers are killed."""
    from spawnflow.pytest_plugin import processes

    before = processes.descendants()
    yield
    left = processes.leftovers(before, float(request.config.getini("spawnflow_leftover_grace")))
    if left:
        pytest.fail(f"the test left {len(left)} process(es) running: {'; '.join(left)}",
                    pytrace=False)  # fmt: skip
