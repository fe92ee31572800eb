"""The same matrix as tox.ini, for nox users: ``nox -s tests``, ``nox -s databases``."""

import nox

PYTHONS = ["3.11", "3.12", "3.13"]
METHODS = ["fork", "forkserver", "spawn"]
nox.options.sessions = ["tests", "lint"]
nox.options.error_on_missing_interpreters = False


def _pytest(session: nox.Session, method: str, backends: str | None = None) -> None:
    session.install("-e", ".[test]")
    env = {"SPAWNFLOW__CORE__MP_START_METHOD": method}
    if backends:
        env["SPAWNFLOW_TEST_BACKENDS"] = backends
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
    _pytest(session, method, {"postgres": "postgres", "mariadb": "mysql"}[server])


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """ruff, as configured in pyproject.toml."""
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
