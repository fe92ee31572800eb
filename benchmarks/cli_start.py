"""CPU of the listing commands: ``dags list``, ``runs list`` and ``tasks states``.

Sets up a home of its own (SQLite, the example Dags parsed, one pass of the scheduler so
that runs and task instances exist), then runs each command as a fresh console-script
process N times, interleaved with baselines measured in the same run: an empty
interpreter, ``import sqlalchemy`` (the floor of any command that reads with SQLAlchemy)
and ``import sqlalchemy.orm``. CPU is the child's user plus system time. Prints the
median and p95 per command in seconds.

    python benchmarks/cli_start.py [--runs 15]

The environment's ``PYTHONDONTWRITEBYTECODE`` is dropped for the children and each is run
once before measuring, so that they load cached bytecode, as an installed spawnflow does
(without the cache spawnflow's own modules are compiled on every start).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _setup import summary

BASELINES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import sqlalchemy": [sys.executable, "-c", "import sqlalchemy"],
    "import sqlalchemy.orm": [sys.executable, "-c", "import sqlalchemy.orm"],
}


def spawnflow(*args: str) -> list[str]:
    return [sys.executable, "-m", "spawnflow", *args]


def cpu_seconds(command: list[str], env: dict[str, str]) -> float:
    """The user and system CPU that ``command``'s process used."""
    before = os.times()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    after = os.times()
    return (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )


def prepare(home: Path) -> tuple[dict[str, str], str]:
    """A migrated home with the example Dags parsed and run once; the environment and a
    run whose task instances ``tasks states`` lists."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAWNFLOW__")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["SPAWNFLOW_HOME"] = str(home)
    quiet = {"env": env, "check": True, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.run(spawnflow("db", "migrate"), **quiet)
    subprocess.run(spawnflow("dag-processor", "--once"), **quiet)
    subprocess.run(spawnflow("scheduler", "--exit-when-idle"), **quiet)
    listed = subprocess.run(spawnflow("runs", "list", "--dag-id", "example_etl", "--limit", "1"),
                            env=env, check=True, capture_output=True, text=True)  # fmt: skip
    run_id = listed.stdout.splitlines()[2].split()[1]
    return env, run_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="measurements per command")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spawnflow-cli-") as folder:
        env, run_id = prepare(Path(folder))
        commands = {
            **BASELINES,
            "spawnflow dags list": spawnflow("dags", "list"),
            "spawnflow runs list": spawnflow("runs", "list"),
            "spawnflow tasks states": spawnflow("tasks", "states", "example_etl", run_id),
        }
        for command in commands.values():
            cpu_seconds(command, env)  # writes the bytecode cache
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(options.runs):  # interleaved: a busy moment hits every command
            for name, command in commands.items():
                seconds[name].append(cpu_seconds(command, env))
    print(f"CPU seconds (user + system) over {options.runs} runs each")
    print(f"{'command':<26}{'median':>8}{'p95':>8}")
    for name, values in seconds.items():
        median, p95 = summary(values)
        print(f"{name:<26}{median:>8.3f}{p95:>8.3f}")


if __name__ == "__main__":
    main()
