"""tox and nox offer each OS only the start methods it has, and say which they test."""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_tox_runs_fork_and_forkserver_environments_only_on_linux_and_macos():
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    conditions = dict(
        line.split(":", 1) for line in config["testenv"]["platform"].strip().splitlines()
    )
    assert {factor.strip(): rule.strip() for factor, rule in conditions.items()} == {
        "fork": "linux|darwin",
        "forkserver": "linux|darwin",
    }
    assert config["testenv:simulate-{windows,macos}"]["platform"].strip() == "linux"


def test_nox_offers_only_spawn_on_windows():
    # Read the function out of the noxfile: nox itself is a dev dependency, not a test one.
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    function = next(
        node for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "start_methods"
    )  # fmt: skip
    namespace: dict = {"sys": __import__("sys")}
    exec(compile(ast.Module(body=[function], type_ignores=[]), "noxfile.py", "exec"), namespace)
    methods = namespace["start_methods"]
    assert methods("win32") == ["spawn"]
    assert methods("linux") == methods("darwin") == ["fork", "forkserver", "spawn"]


def test_tox_sets_the_product_start_method_for_each_method_environment():
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    settings = dict(
        (part.strip() for part in line.split("=", 1))
        for line in config["testenv"]["set_env"].strip().splitlines()
    )
    for method in ("fork", "forkserver", "spawn"):
        assert settings[f"{method}: SPAWNFLOW__CORE__MP_START_METHOD"] == method


def test_the_test_list_wins_over_the_product_setting_and_is_named(monkeypatch):
    from tests.conftest import method_choice

    monkeypatch.setenv("SPAWNFLOW__CORE__MP_START_METHOD", "spawn")
    monkeypatch.delenv("SPAWNFLOW_TEST_START_METHODS", raising=False)
    assert method_choice() == (["spawn"], "SPAWNFLOW__CORE__MP_START_METHOD")
    monkeypatch.setenv("SPAWNFLOW_TEST_START_METHODS", "fork, spawn")
    assert method_choice() == (["fork", "spawn"], "SPAWNFLOW_TEST_START_METHODS")
