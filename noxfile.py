"""The same matrix as tox.ini, for nox users: ``nox -s tests``, ``nox -s databases``,
``nox -s simulate`` (Linux: the suite as if on Windows and on macOS), ``nox -s typecheck``."""

import sys
from pathlib import Path

import nox

PYTHONS = ["3.11", "3.12", "3.13", "3.14"]


def start_methods(platform: str = sys.platform) -> list[str]:
    """The start methods an OS has: Windows has spawn only."""
    return ["spawn"] if platform == "win32" else ["fork", "forkserver", "spawn"]


METHODS = start_methods()
nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.error_on_missing_interpreters = False


def _pytest(session: nox.Session, method: str | None, **env: str) -> None:
    session.install("-e", ".[test]")
    if method:
        env["SPAWNFLOW__CORE__MP_START_METHOD"] = method
    session.run("python", "-m", "pytest", *session.posargs, env=env)


@nox.session(python=PYTHONS)
@nox.parametrize("method", METHODS)
def tests(session: nox.Session, method: str) -> None:
    """Every test under one start method (SQLite, plus servers that are running)."""
    _pytest(session, method)


@nox.session(python=PYTHONS)
@nox.parametrize("server", ["postgres", "mariadb"])
@nox.parametrize("method", METHODS)
def databases(session: nox.Session, method: str, server: str) -> None:
    """Every test under one start method against one database server only."""
    backend = {"postgres": "postgres", "mariadb": "mysql"}[server]
    _pytest(session, method, SPAWNFLOW_TEST_BACKENDS=backend)


@nox.session(python=PYTHONS[0])
@nox.parametrize("simulated", ["windows", "macos"])
def simulate(session: nox.Session, simulated: str) -> None:
    """Every test, with every process simulating Windows or macOS (Linux only)."""
    if sys.platform != "linux":
        session.skip("the OS simulation runs on Linux")
    folder = str(Path(__file__).parent / "tests" / "simulate")
    _pytest(session, None, SPAWNFLOW_TEST_SIMULATE_OS=simulated, PYTHONPATH=folder)


@nox.session(python=False)
def typecheck(session: nox.Session) -> None:
    """mypy for each OS spawnflow runs on."""
    for platform in ("linux", "win32", "darwin"):
        session.run("mypy", "--platform", platform, "spawnflow")


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """ruff and the import contracts, as configured in pyproject.toml."""
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")
