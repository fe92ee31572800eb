"""Databases for the triggerer tests: SQLite and PostgreSQL; PostgreSQL and MariaDB for
two triggerers claiming at once."""

from __future__ import annotations

import pytest

from tests.conftest import _server_database, backends_under_test


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "deferral_db" in metafunc.fixturenames:
        wanted = [b for b in ("sqlite", "postgres") if b in backends_under_test()]
        metafunc.parametrize("deferral_db", wanted)
    if "claims_db" in metafunc.fixturenames:  # several writers at once: the servers
        wanted = [b for b in ("postgres", "mysql") if b in backends_under_test()]
        metafunc.parametrize("claims_db", wanted)


@pytest.fixture
def deferral_url(deferral_db: str, tmp_path, worker_id: str, testrun_uid: str) -> str:
    if deferral_db == "sqlite":
        return f"sqlite:///{(tmp_path / 'deferral.db').as_posix()}"
    return _server_database(deferral_db, f"spawnflow_test_{testrun_uid[:10]}_{worker_id}")


@pytest.fixture
def claims_url(claims_db: str, worker_id: str, testrun_uid: str) -> str:
    return _server_database(claims_db, f"spawnflow_test_{testrun_uid[:10]}_{worker_id}")
